"""Build the zip Gradescope's "Configure Autograder" page takes: posenc-grade as its autograder.

    .venv/bin/python tools/make_autograder_zip.py            # writes _build/autograder.zip

Gradescope unpacks the zip into /autograder/source and needs setup.sh and run_autograder at
its root (its autograder specification); both come from autograder/. Beside them goes what
posenc-grade needs and nothing else: the package, the trusted solutions/ (the hidden tests'
source: the zip is for the instructor's Gradescope account only, never for learners),
pyproject.toml, requirements.lock, README.md and LICENSE.
"""

from __future__ import annotations

import argparse
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ("setup.sh", "run_autograder")
COURSE = ("posenc_lesson", "solutions", "pyproject.toml", "requirements.lock", "README.md", "LICENSE")


def members() -> list[tuple[Path, str]]:
    """(file on disk, name in the zip), scripts first."""
    out = [(ROOT / "autograder" / name, name) for name in SCRIPTS]
    for entry in COURSE:
        path = ROOT / entry
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        out += [(p, p.relative_to(ROOT).as_posix()) for p in files
                if "__pycache__" not in p.parts and not p.name.endswith((".pyc", ".ipynb_checkpoints"))]
    return out


def build(dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, name in members():
            info = zipfile.ZipInfo.from_file(path, name)
            if name in SCRIPTS:
                info.external_attr = (0o100755 & 0xFFFF) << 16  # executable, as Gradescope runs them
            zf.writestr(info, path.read_bytes(), zipfile.ZIP_DEFLATED)
    return dest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "autograder.zip")
    args = parser.parse_args(argv)
    print(build(args.out))


if __name__ == "__main__":
    main()

"""Build the zip Gradescope's "Configure Autograder" page takes: posenc-grade as its autograder.

    .venv/bin/python tools/make_autograder_zip.py            # writes _build/autograder.zip
    .venv/bin/python tools/make_autograder_zip.py --key grades/.posenc-grade-key   (the default)

Gradescope unpacks the zip into /autograder/source and needs setup.sh and run_autograder at
its root (its autograder specification); both come from autograder/. Beside them goes what
posenc-grade needs and nothing else: the package, the trusted solutions/ (the hidden tests'
source: the zip is for the instructor's Gradescope account only, never for learners),
pyproject.toml, requirements.lock, README.md and LICENSE, and the instructor's key (``--key``,
the one ``posenc-grade --out grades`` made, created here if there is none yet) as
``.posenc-grade-key``: run_autograder grades every submission with it and a seed of that
submission's own (Gradescope's submission id), so a regrade draws the same hidden inputs and
gives the same score. The zip holds the key and the solutions: it goes to your Gradescope
account and nowhere else (_build/ is ignored by git and by the image build).
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


def build(dest: Path, key: Path | None = None) -> Path:
    """The zip at ``dest``; with ``key``, that key file (created if missing) as .posenc-grade-key."""
    shipped = []
    if key is not None:
        from posenc_lesson.grader import privacy
        from posenc_lesson.grader.key import KEY_NAME, load_or_create

        why = privacy.refusal("--key", key, "the key to the hidden inputs")
        if why:
            raise SystemExit(f"make_autograder_zip: {why}")
        key.parent.mkdir(parents=True, exist_ok=True)
        load_or_create(key)
        shipped = [(key, KEY_NAME)]
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, name in members() + shipped:
            info = zipfile.ZipInfo.from_file(path, name)
            if name in SCRIPTS:
                info.external_attr = (0o100755 & 0xFFFF) << 16  # executable, as Gradescope runs them
            zf.writestr(info, path.read_bytes(), zipfile.ZIP_DEFLATED)
    return dest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "autograder.zip")
    parser.add_argument("--key", type=Path, default=Path("grades") / ".posenc-grade-key",
                        help="your key (default grades/.posenc-grade-key, created if missing)")
    args = parser.parse_args(argv)
    print(build(args.out, args.key))


if __name__ == "__main__":
    main()

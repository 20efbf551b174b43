"""Time posenc-grade at another commit and at this checkout on the same class, like for like.

Issue 33 asks that the round-3 grader's time per submission stay within 15 % of the grader before
it (commit 296deae). Most exercises have changed tasks since, so only a notebook whose solution
cells carry the same grade ids at both commits compares like for like; this script refuses any
other. The class: ``--students`` submissions of that notebook, half the worked solution and half
the blank exercise (this checkout's files, the same bytes for both graders). Each grader grades
it ``--rounds`` times, the two taking turns, with the same seed, one job and the sandbox on; the
old one runs from a detached git worktree with this venv's Python (PYTHONPATH points at it).

    python tools/compare_graders.py [--old 296deae] [--stem 01_permutation_equivariance]
                                    [--students 8] [--rounds 3]

Prints each run's wall and CPU seconds (the grader, its zygote and kernels) and, per grader, the
median per submission, then new / old. Nothing in the checkout changes.

Measured 2026-12-05 on 2 idle cores, lesson 01, 8 submissions, 5 rounds: 296deae 0.95 s wall and
0.69 s CPU per submission, commit 720f7c5 0.94 s and 0.58 s (new / old: wall 0.986, CPU 0.836).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def grade_ids(nb_text: str) -> list[str]:
    cells = json.loads(nb_text)["cells"]
    return sorted(c["metadata"]["nbgrader"]["grade_id"] for c in cells
                  if c["metadata"].get("nbgrader", {}).get("solution"))


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(tree: Path, klass: Path, out: Path) -> tuple[float, float]:
    env = {**os.environ, "POSENC_FAST": "1", "PYTHONPATH": str(tree)}
    where = subprocess.run([sys.executable, "-c", "import posenc_lesson; print(posenc_lesson.__file__)"],
                           cwd=tree, env=env, capture_output=True, text=True).stdout.strip()
    if not Path(where).resolve().is_relative_to(tree.resolve()):
        sys.exit(f"the grader for {tree} would import the library from {where}, not from that tree")
    shutil.rmtree(out, ignore_errors=True)
    cpu, start = children_cpu(), time.monotonic()
    done = subprocess.run([sys.executable, "-m", "posenc_lesson.grader", "--jobs", "1", "--seed", "5",
                           "--no-report", "--out", str(out), str(klass)], cwd=tree, env=env,
                          capture_output=True, text=True)
    wall = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"posenc-grade in {tree} failed:\n{done.stderr[-3000:]}")
    return wall, children_cpu() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", default="296deae")
    parser.add_argument("--stem", default="01_permutation_equivariance")
    parser.add_argument("--students", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rel = f"solutions/{args.stem}.ipynb"
    old_text = subprocess.run(["git", "show", f"{args.old}:{rel}"], cwd=ROOT, capture_output=True,
                              text=True).stdout
    if not old_text or grade_ids(old_text) != grade_ids((ROOT / rel).read_text()):
        sys.exit(f"--stem: {args.stem}'s tasks differ between {args.old} and this checkout (or it is not "
                 "there): no like-for-like comparison; choose a notebook whose grade ids are the same")
    with tempfile.TemporaryDirectory(prefix="compare-graders-") as tmp:
        tmp_path = Path(tmp)
        old = tmp_path / "old"
        subprocess.run(["git", "worktree", "add", "--detach", str(old), args.old], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            klass = tmp_path / "class"
            for n in range(args.students):
                source = ROOT / ("solutions" if n % 2 == 0 else "exercises") / f"{args.stem}.ipynb"
                (klass / f"s{n:02d}").mkdir(parents=True)
                shutil.copyfile(source, klass / f"s{n:02d}" / source.name)
            times: dict[str, list[tuple[float, float]]] = {"old": [], "new": []}
            for r in range(args.rounds):
                for name, tree in (("old", old), ("new", ROOT)):
                    wall, cpu = run(tree, klass, tmp_path / f"out-{name}")
                    times[name].append((wall, cpu))
                    print(f"round {r + 1} {name} ({args.old if name == 'old' else 'this checkout'}): "
                          f"{wall:.1f} s wall, {cpu:.1f} s CPU", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, capture_output=True)
    per = {name: (statistics.median(w for w, _ in t) / args.students,
                  statistics.median(c for _, c in t) / args.students) for name, t in times.items()}
    for name, (wall, cpu) in per.items():
        print(f"{name}: {wall:.2f} s wall, {cpu:.2f} s CPU per submission (median of {args.rounds})")
    print(f"new / old: wall {per['new'][0] / per['old'][0]:.3f}, CPU {per['new'][1] / per['old'][1]:.3f}")


if __name__ == "__main__":
    main()

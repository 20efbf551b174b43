"""Section 8 of `make bench`: `make test` itself, its wall time and CPU time, and per test file.

`make test` runs as a contributor runs it (lint, then one pytest session on `WORKERS` workers,
3 by default), with POSENC_TEST_TIMES set: tests/conftest.py then writes every file's wall and
CPU seconds (the test process and the children it waited for: kernels, servers, browsers) to a
JSON file. The whole run's CPU time is this process's children's (resource.getrusage), so other
work on the machine does not count; its wall time does, which is why the load average is
printed beside it.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def bench_suite(args, log) -> dict:
    """`make test` once; its outcome, wall and CPU seconds, and the per-file times."""
    with tempfile.TemporaryDirectory() as tmp:
        times = Path(tmp) / "test_times.json"
        env = {**os.environ, "POSENC_TEST_TIMES": str(times)}
        load, date = os.getloadavg(), datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        wall, cpu = time.perf_counter(), _children_cpu_s()
        done = subprocess.run(["make", "--no-print-directory", "test"], cwd=ROOT, env=env,
                              capture_output=True, text=True)
        wall, cpu = time.perf_counter() - wall, _children_cpu_s() - cpu
        files = json.loads(times.read_text()) if times.exists() else {}
    said = reversed(done.stdout.splitlines())
    summary = next((line for line in said if " in " in line and "passed" in line), f"exit {done.returncode}")
    log(f"make test: {wall:.0f} s wall, {cpu:.0f} s CPU, {summary.strip('= ')}")
    warned = done.stdout.partition("warnings summary")[2].partition("-- Docs:")[0]
    if warned.strip():  # e.g. test_viz's or the kernel zygote's account of a long wait
        log(f"make test's warnings:{warned.rstrip()}")
    return {"date": date, "load_start": load, "load_end": os.getloadavg(), "wall_s": wall, "cpu_s": cpu,
            "returncode": done.returncode, "summary": summary.strip("= "), "files": files}


def suite_section(suite: dict) -> list[str]:
    """The report's lines for section 8."""
    files = suite["files"]
    lines = ["## 8. `make test`\n",
             "`make test` as a contributor runs it (lint, then one pytest session, "
             f"`-n {os.environ.get('WORKERS', 3)} --dist loadfile`), "
             f"{suite['date']}: **{suite['wall_s'] / 60:.1f} min wall ({suite['wall_s']:.0f} s), "
             f"{suite['cpu_s']:.0f} s CPU** (make's children: pytest, its workers, kernels, servers, "
             f"browsers); {suite['summary']}. Load average "
             f"{' / '.join(f'{x:.1f}' for x in suite['load_start'])} at the start, "
             f"{' / '.join(f'{x:.1f}' for x in suite['load_end'])} at the end (the wall time counts "
             "other work on the machine, the CPU time does not).\n"]
    if suite["returncode"]:
        lines.append(f"**It failed (exit status {suite['returncode']}):** these are a failing run's times.\n")
    if not files:
        lines.append("No per-file times: tests/conftest.py wrote none (POSENC_TEST_TIMES).\n")
        return lines
    total_wall = sum(f["wall_s"] for f in files.values())
    total_cpu = sum(f["cpu_s"] for f in files.values())
    lines.append("Per file, slowest first (wall: the sum of its tests' setup, call and teardown on the "
                 "worker that ran it; CPU: that worker's and its children's; a shared fixture counts "
                 "for the file that first needed it). The workers run files side by side, so "
                 f"the walls add up to {total_wall:.0f} s, up to {os.environ.get('WORKERS', 3)} times "
                 "the session's.\n")
    lines.append("| file | tests | wall s | CPU s | share of CPU |")
    lines.append("|---|---:|---:|---:|---:|")
    for path, f in sorted(files.items(), key=lambda kv: -kv[1]["cpu_s"]):
        lines.append(f"| `{path}` | {f['tests']} | {f['wall_s']:.1f} | {f['cpu_s']:.1f} | "
                     f"{100 * f['cpu_s'] / max(total_cpu, 1e-9):.1f} % |")
    lines.append(f"| all {len(files)} files | {sum(f['tests'] for f in files.values())} | {total_wall:.0f} | "
                 f"{total_cpu:.0f} | 100 % |\n")
    return lines

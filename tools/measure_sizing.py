"""What one learner costs a hub: each lesson's kernel peak memory and CPU seconds, measured.

    .venv/bin/python tools/measure_sizing.py            # lessons full and fast, worked exercises full
    .venv/bin/python tools/measure_sizing.py --only 01  # one lesson (does not rewrite the CSV)
    .venv/bin/python tools/measure_sizing.py --derive   # only re-derive sizing.json from the CSV
    .venv/bin/python tools/measure_sizing.py --resume   # measure only what sizing.csv lacks

Each notebook runs top to bottom in a fresh kernel (nbclient, in its own folder, as a learner
runs it), once with POSENC_FAST=1 ("fast", what `make test` runs) and once without ("full", what
a learner runs under `make lab` or on a hub). Recorded per run, in benchmarks/sizing.csv:

    kernel_peak_mib   the kernel's own peak resident memory (getrusage ru_maxrss, exact)
    tree_peak_mib     the peak of the kernel plus its child processes together (lesson 08 trains
                      two models at once in worker processes), sampled from /proc every 50 ms
    cpu_s             CPU seconds, user + system, of the kernel and its children (getrusage)

and the idle single-user server (JupyterLab with nbgitpuller, no kernel) once. From those,
benchmarks/sizing.json derives what an admin needs (see `derive`): memory per concurrent
learner, the machine for 30 and 100 concurrent learners by The Littlest JupyterHub's rule
(concurrent users x memory per user + 128 MB), and the Kubernetes guarantees and limits that
deploy/config.yaml carries (tests/test_z2jh.py checks they agree).

CPU seconds do not depend on how busy the machine is (much); wall times do, and on a shared
machine they are not recorded here at all.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
CSV_PATH = ROOT / "benchmarks" / "sizing.csv"
JSON_PATH = ROOT / "benchmarks" / "sizing.json"
FIELDS = ["notebook", "setting", "kernel_peak_mib", "tree_peak_mib", "cpu_s"]
# The Littlest JupyterHub's rule (docs/howto/admin/resource-estimation): memory =
# max concurrent users x max memory per user + 128 MB; per user, the measured peak plus 20-40 %
# headroom; CPU = concurrent users x max CPU per user + 20 % of one core.
TLJH_OVERHEAD_MIB = 128
HEADROOM = 1.3
CLASSES = (30, 100)

USAGE_CELL = """import json as _j, resource as _r
_s, _c = _r.getrusage(_r.RUSAGE_SELF), _r.getrusage(_r.RUSAGE_CHILDREN)
_cpu = _s.ru_utime + _s.ru_stime + _c.ru_utime + _c.ru_stime
print(_j.dumps({"maxrss_kib": _s.ru_maxrss, "cpu_s": _cpu}))"""


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                todo += [int(c) for c in task.read_text().split()]
            except OSError:
                pass
    return out


class TreeSampler(threading.Thread):
    """The peak of the summed resident memory of a process and its descendants."""

    def __init__(self, pid: int, every_s: float = 0.05):
        super().__init__(daemon=True)
        self.pid, self.every_s, self.peak_kib = pid, every_s, 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.peak_kib = max(self.peak_kib, sum(_rss_kib(p) for p in _tree(self.pid)))
            self._halt.wait(self.every_s)

    def stop(self) -> int:
        self._halt.set()
        self.join()
        return self.peak_kib


def measure_notebook(path: Path, fast: bool, timeout: int = 1800) -> dict:
    """Run one notebook in a fresh kernel; its peak memory and CPU seconds."""
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(USAGE_CELL))
    env_fast = os.environ.get("POSENC_FAST")
    os.environ["POSENC_FAST"] = "1" if fast else "0"  # the kernel inherits the environment
    try:
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}})
        with client.setup_kernel():
            sampler = TreeSampler(client.km.provisioner.process.pid)
            sampler.start()
            try:
                for index, cell in enumerate(client.nb.cells):
                    client.execute_cell(cell, index)
            finally:
                tree_kib = sampler.stop()
    finally:
        if env_fast is None:
            os.environ.pop("POSENC_FAST", None)
        else:
            os.environ["POSENC_FAST"] = env_fast
    usage = json.loads(nb.cells[-1].outputs[-1]["text"])
    return {"notebook": path.relative_to(ROOT).as_posix(), "setting": "fast" if fast else "full",
            "kernel_peak_mib": round(usage["maxrss_kib"] / 1024, 1),
            "tree_peak_mib": round(max(tree_kib, usage["maxrss_kib"]) / 1024, 1),
            "cpu_s": round(usage["cpu_s"], 1)}


def measure_server() -> dict:
    """The idle single-user server: JupyterLab (with nbgitpuller) before any kernel starts."""
    with tempfile.TemporaryDirectory() as tmp:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        token = secrets.token_hex(16)
        env = {**os.environ, "HOME": tmp, "JUPYTER_CONFIG_DIR": f"{tmp}/config",
               "JUPYTER_RUNTIME_DIR": f"{tmp}/runtime", "JUPYTER_DATA_DIR": f"{tmp}/data"}
        cmd = [str(Path(sys.executable).with_name("jupyter")), "lab", "--no-browser",
               "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", f"--ServerApp.token={token}",
               f"--ServerApp.root_dir={ROOT}"]
        if os.geteuid() == 0:
            cmd.append("--allow-root")
        server = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    req = urllib.request.Request(f"http://127.0.0.1:{port}/lab",
                                                 headers={"Authorization": f"token {token}"})
                    urllib.request.urlopen(req, timeout=10).read()  # the page served once
                    break
                except OSError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise RuntimeError("JupyterLab did not start") from None
                    time.sleep(0.5)
            time.sleep(2)
            return {"notebook": "(single-user server, idle)", "setting": "-",
                    "kernel_peak_mib": round(_rss_kib(server.pid) / 1024, 1),
                    "tree_peak_mib": round(_rss_kib(server.pid) / 1024, 1), "cpu_s": ""}
        finally:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def _round_up(x: float, step: float) -> float:
    return round(math.ceil(x / step - 1e-9) * step, 3)


def derive(rows: list[dict]) -> dict:
    """From the measured rows, the numbers an admin sizes a hub with.

    A learner works in a lesson with its exercise notebook open beside it: memory per learner
    is the idle server plus, for the worst lesson, the lesson's tree peak plus its worked
    exercise's kernel peak (full settings), times the 1.3 headroom TLJH's guide asks for.
    """
    server = next(float(r["tree_peak_mib"]) for r in rows if r["setting"] == "-")
    # "full-partial": a full run cut short (a cell over its time limit on a busy machine), with the
    # highest reading taken while it ran: a lower bound, used as the lesson's peak and listed
    partial = {r["notebook"]: r for r in rows if r["setting"] == "full-partial"}
    full = {**partial, **{r["notebook"]: r for r in rows if r["setting"] == "full"}}
    # an exercise not measured yet counts as the largest exercise kernel measured, or else as
    # lesson 00's kernel (torch and the library imported, little else); sizing.json lists them
    exercises = [float(r["kernel_peak_mib"]) for nb, r in full.items() if nb.startswith("solutions/")]
    stand_in = max(exercises) if exercises else float(full["notebooks/00_welcome.ipynb"]["kernel_peak_mib"])
    per_lesson, unmeasured = {}, []
    for nb, r in full.items():
        if not nb.startswith("notebooks/"):
            continue
        solution = full.get("solutions/" + nb.removeprefix("notebooks/"))
        if solution is None and nb != "notebooks/00_welcome.ipynb":
            unmeasured.append("solutions/" + nb.removeprefix("notebooks/"))
        beside = float(solution["kernel_peak_mib"]) if solution else stand_in
        per_lesson[nb] = float(r["tree_peak_mib"]) + (0 if nb.endswith("00_welcome.ipynb") else beside)
    if not per_lesson:
        raise ValueError("sizing.csv holds no lesson measured in the full setting: run "
                         "tools/measure_sizing.py --resume to measure the rows it lacks")
    worst = max(per_lesson, key=per_lesson.get)
    peak = server + per_lesson[worst]
    per_user_gib = _round_up(peak * HEADROOM / 1024, 0.25)
    typical_gib = _round_up((server + sorted(per_lesson.values())[len(per_lesson) // 2]) / 1024, 0.25)
    cpu_full = {nb: float(r["cpu_s"]) for nb, r in full.items() if nb.startswith("notebooks/") and r["cpu_s"]}
    machines = {}
    for n in CLASSES:
        mem_gib = n * per_user_gib + TLJH_OVERHEAD_MIB / 1024
        machines[str(n)] = {"memory_gib": round(mem_gib, 2), "memory_gib_rounded": int(math.ceil(mem_gib)),
                            "cores_if_all_run_the_lab_at_once": round(n * 2 + 0.2, 1),
                            "cores_at_guarantee": round(n * 0.5 + 0.2, 1)}
    return {
        "server_idle_mib": server,
        "worst_lesson": worst,
        "worst_lesson_peak_mib": round(per_lesson[worst], 1),
        "peak_per_learner_mib": round(peak, 1),
        "memory_per_learner_gib": per_user_gib,
        "headroom": HEADROOM,
        "k8s": {"memory_guarantee": f"{typical_gib:g}G", "memory_limit": f"{per_user_gib:g}G",
                "cpu_guarantee": 0.5, "cpu_limit": 2.0},
        "machines_tljh": machines,
        "tljh_rule": "concurrent users x memory per user + 128 MB",
        "cpu_s_full": cpu_full,
        "cpu_s_full_all_lessons": round(sum(cpu_full.values()), 1),
        "exercises_not_measured": unmeasured, "exercise_stand_in_mib": stand_in,
        "lessons_full_lower_bound": sorted(nb for nb, r in full.items() if r["setting"] == "full-partial"),
        "lessons_not_measured_full": sorted(
            p.relative_to(ROOT).as_posix() for p in ROOT.glob("notebooks/[0-9][0-9]_*.ipynb")
            if p.relative_to(ROOT).as_posix() not in full),
    }


def _write_csv(rows: list[dict]) -> None:
    with CSV_PATH.open("w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        writer.writerows(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="a lesson number, e.g. 01: measure it and print, write nothing")
    parser.add_argument("--derive", action="store_true", help="re-derive sizing.json from sizing.csv")
    parser.add_argument("--resume", action="store_true", help="keep the rows sizing.csv already has")
    args = parser.parse_args()
    if args.derive:
        with CSV_PATH.open() as f:
            rows = list(csv.DictReader(f))
    else:
        lessons = sorted(ROOT.glob("notebooks/[0-9][0-9]_*.ipynb"))
        solutions = sorted(ROOT.glob("solutions/[0-9][0-9]_*.ipynb"))
        if args.only:
            lessons = [p for p in lessons if p.name.startswith(args.only)]
            solutions = [p for p in solutions if p.name.startswith(args.only)]
        # what sizes a hub first: the full setting (what learners run), then the fast one, then the
        # worked exercises; with --resume a run cut short goes on where it stopped
        runs = [(p, False) for p in lessons] + [(p, True) for p in lessons] + [(p, False) for p in solutions]
        done = {}
        if args.resume and CSV_PATH.exists():
            with CSV_PATH.open() as f:
                done = {(r["notebook"], r["setting"]): r for r in csv.DictReader(f)}
        rows = [done.get(("(single-user server, idle)", "-")) or measure_server()]
        print(rows[-1], flush=True)
        for path, fast in runs:
            key = (path.relative_to(ROOT).as_posix(), "fast" if fast else "full")
            rows.append(done.get(key) or measure_notebook(path, fast))
            print(rows[-1], flush=True)
            if not args.only:
                _write_csv(rows)  # after every notebook: a run cut short keeps what it measured
        if args.only:
            return
    sizing = derive(rows)
    before = json.loads(JSON_PATH.read_text()) if JSON_PATH.exists() else {}
    when = datetime.fromtimestamp(CSV_PATH.stat().st_mtime, UTC) if args.derive else datetime.now(UTC)
    sizing["measured"] = (before.get("measured") if args.derive and before.get("measured") else
                          f"{when:%Y-%m-%d %H:%M} UTC, on {os.cpu_count()} CPU cores shared with other jobs "
                          f"(load average {os.getloadavg()[0]:.0f} at the end)")
    sizing["how"] = ("tools/measure_sizing.py: each notebook in a fresh kernel (nbclient); peak RSS by "
                     "getrusage and by /proc sampling of the kernel's process tree; CPU seconds by getrusage")
    JSON_PATH.write_text(json.dumps(sizing, indent=2) + "\n")
    print(json.dumps(sizing, indent=2))


def markdown() -> str:
    """The sizing section of benchmarks/README.md (benchmarks/run.py), from the committed CSV and JSON."""
    if not (CSV_PATH.exists() and JSON_PATH.exists()):
        return ("## 6. Sizing a hub: memory and CPU per learner\n\nNot measured yet: run "
                "`.venv/bin/python tools/measure_sizing.py` (or `make bench` with `--sizing`).\n")
    with CSV_PATH.open() as f:
        rows = list(csv.DictReader(f))
    sizing = json.loads(JSON_PATH.read_text())
    by = {(r["notebook"], r["setting"]): r for r in rows}
    out = ["## 6. Sizing a hub: memory and CPU per learner\n",
           f"Measured by `tools/measure_sizing.py` ({sizing.get('measured', '')}): each notebook in a "
           "fresh kernel, peak resident memory of the kernel with its worker processes, and CPU "
           "seconds (user + system). CPU seconds hardly depend on how busy the machine is; wall times "
           "do, and on this shared machine they are not given. A learner's single-user server, idle: "
           f"{sizing['server_idle_mib']:.0f} MiB.\n",
           "| lesson | fast: peak MiB | fast: CPU s | full: peak MiB | full: CPU s "
           "| its exercise, worked (full): peak MiB | CPU s |",
           "|---|---:|---:|---:|---:|---:|---:|"]

    def cell(nb: str, setting: str, key: str) -> str:
        r = by.get((nb, setting))
        if r is None and setting == "full" and (nb, "full-partial") in by:
            r = by[(nb, "full-partial")]
            return f"≥ {r[key]} (cut short)" if r[key] else "cut short"
        return r[key] if r else "not measured"

    lessons = {p.relative_to(ROOT).as_posix() for p in ROOT.glob("notebooks/[0-9][0-9]_*.ipynb")}
    for nb in sorted(lessons | {r["notebook"] for r in rows if r["notebook"].startswith("notebooks/")}):
        sol = "solutions/" + nb.removeprefix("notebooks/")
        out.append(f"| {Path(nb).stem} | {cell(nb, 'fast', 'tree_peak_mib')} | {cell(nb, 'fast', 'cpu_s')} "
                   f"| {cell(nb, 'full', 'tree_peak_mib')} | {cell(nb, 'full', 'cpu_s')} "
                   f"| {cell(sol, 'full', 'kernel_peak_mib')} | {cell(sol, 'full', 'cpu_s')} |")
    k8s, machines = sizing["k8s"], sizing["machines_tljh"]
    out += ["",
            f"**Per concurrent learner**: the server, the worst lesson ({Path(sizing['worst_lesson']).stem}) "
            f"and its exercise open beside it peak at {sizing['peak_per_learner_mib']:.0f} MiB; with the "
            f"{sizing['headroom']:g}x headroom The Littlest JupyterHub's guide asks for, "
            f"**{sizing['memory_per_learner_gib']:g} GiB per learner**.",
            "",
            "**One machine** (The Littlest JupyterHub: concurrent users x memory per user + 128 MB): "
            + "; ".join(f"{n} concurrent learners: {m['memory_gib']:g} GiB, so a "
                        f"{m['memory_gib_rounded']} GiB machine, with {m['cores_at_guarantee']:g} cores "
                        "at half a core each "
                        f"({m['cores_if_all_run_the_lab_at_once']:g} if all train at once)"
                        for n, m in machines.items()) + ".",
            "",
            "**Kubernetes** (`deploy/config.yaml`, checked against this file by `tests/test_z2jh.py`): "
            f"memory guarantee {k8s['memory_guarantee']}, limit {k8s['memory_limit']}; CPU guarantee "
            f"{k8s['cpu_guarantee']:g}, limit {k8s['cpu_limit']:g}.\n"]
    return "\n".join(out)


if __name__ == "__main__":
    main()

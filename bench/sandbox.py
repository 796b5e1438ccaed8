"""code_run's sandbox: what starting one costs, and how many run at once on this machine.

Overhead: ``print(1)`` in the sandbox's Python, timed three ways, each ``--runs`` times:
plain (the same interpreter as a subprocess, no sandbox), the bubblewrap backend alone, and the
whole ``code_run`` tool (workspace preparation, code file, sandbox, output listing). Capacity:
N sandboxes started at once, each running ``--workload`` Python that sleeps 2 s, for each N
of ``--concurrency``; reported: wall time until all ended, failures, and the machine's memory
in use at the peak above what it was before (MemTotal - MemAvailable, sampled every 50 ms).

    .venv/bin/python bench/sandbox.py [--runs 50] [--concurrency 8 32 64 128] [--json]

Needs bubblewrap and the sandbox Python (`make sandbox-python`). Workspaces live in a
temporary folder under var/ that is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import BenchError, git_commit, load_average, log, median, percentile, stop_on_signals

ROOT = Path(__file__).resolve().parent.parent
SLEEP_SECONDS = 2.0
MEMORY_SAMPLE_SECONDS = 0.05
WORKLOADS = {
    "sleep": "import time\ntime.sleep({seconds})",
    "numpy": "import numpy, time\nnumpy.ones(1000).sum()\ntime.sleep({seconds})",
    "pandas": "import pandas, time\npandas.DataFrame({{'a': [1]}})\ntime.sleep({seconds})",
}


def set_up_django(sandbox_root: Path) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django
    from django.conf import settings

    django.setup()
    settings.SANDBOX_ROOT = sandbox_root


def memory_in_use_bytes() -> int:
    fields = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        name, value = line.split(":", 1)
        fields[name] = int(value.split()[0]) * 1024
    return fields["MemTotal"] - fields["MemAvailable"]


def new_context() -> Any:
    from tools.builtins.base import ToolContext

    return ToolContext(
        tenant_id=uuid.uuid4(),
        agent_id=None,
        session_id=uuid.uuid4(),
        run_id=uuid.uuid4(),
        user_id=None,
        user_role="member",
    )


def run_in_sandbox(code: str, *, limits: Any) -> tuple[float, int]:
    """(seconds, exit code) of the backend alone, in a fresh session workspace."""
    from tools.builtins.code import sandbox_backend
    from tools.sandbox.environment import sandbox_python
    from tools.sandbox.workspaces import prepare_workspace, sandbox_uid_for

    context = new_context()
    folders = prepare_workspace(context.tenant_id, context.session_id)
    started = time.perf_counter()
    result = sandbox_backend().run(
        [str(sandbox_python()), "-c", code],
        folders=folders,
        limits=limits,
        should_stop=lambda: False,
        run_as_uid=sandbox_uid_for(context.session_id),
    )
    return time.perf_counter() - started, result.exit_code


def time_plain(runs: int) -> list[float]:
    from tools.sandbox.environment import sandbox_python

    timings = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([str(sandbox_python()), "-c", "print(1)"], check=True, capture_output=True)
        timings.append(time.perf_counter() - started)
    return timings


def time_backend(runs: int) -> list[float]:
    from tools.builtins.code import configured_limits

    timings = []
    for _ in range(runs):
        seconds, exit_code = run_in_sandbox("print(1)", limits=configured_limits())
        if exit_code != 0:
            raise BenchError(f"print(1) in the sandbox exited {exit_code}")
        timings.append(seconds)
    return timings


def time_tool(runs: int) -> list[float]:
    from tools.builtins.code import run_code_run

    context = new_context()
    timings = []
    for _ in range(runs):
        started = time.perf_counter()
        text = run_code_run({"language": "python", "code": "print(1)"}, context)
        timings.append(time.perf_counter() - started)
        if not text.startswith("exit code: 0"):
            raise BenchError(f"code_run print(1) failed: {text}")
    return timings


def overhead_rows(runs: int) -> list[dict[str, Any]]:
    rows = []
    for label, measure in [
        ("plain python3 -c 'print(1)'", time_plain),
        ("bubblewrap backend", time_backend),
        ("code_run tool", time_tool),
    ]:
        log(f"overhead: {label}, {runs} runs")
        timings = measure(runs)
        rows.append(
            {
                "what": label,
                "runs": runs,
                "median_ms": median(timings) * 1000,
                "p95_ms": percentile(timings, 0.95) * 1000,
            }
        )
    return rows


def concurrency_row(count: int, workload: str) -> dict[str, Any]:
    from tools.builtins.code import configured_limits

    code = WORKLOADS[workload].format(seconds=SLEEP_SECONDS)
    limits = configured_limits()
    baseline = memory_in_use_bytes()
    peak = baseline
    is_running = True

    def sample_memory() -> None:
        nonlocal peak
        while is_running:
            peak = max(peak, memory_in_use_bytes())
            time.sleep(MEMORY_SAMPLE_SECONDS)

    sampler = threading.Thread(target=sample_memory, daemon=True)
    sampler.start()
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=count) as pool:
        outcomes = list(pool.map(lambda _: run_in_sandbox(code, limits=limits), range(count)))
    wall = time.perf_counter() - started
    is_running = False
    sampler.join()
    failures = sum(1 for _seconds, exit_code in outcomes if exit_code != 0)
    return {
        "sandboxes": count,
        "workload": workload,
        "wall_seconds": wall,
        "failures": failures,
        "peak_memory_mb": (peak - baseline) / 1_048_576,
        "memory_per_sandbox_mb": (peak - baseline) / 1_048_576 / count,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 32, 64, 128])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), nargs="+", default=["sleep", "pandas"])
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args(argv)
    (ROOT / "var").mkdir(exist_ok=True)
    sandbox_root = Path(tempfile.mkdtemp(dir=ROOT / "var", prefix="bench-sandbox-"))
    sandbox_root.chmod(0o711)
    load_before = load_average()
    try:
        with stop_on_signals():
            set_up_django(sandbox_root)
            from tools.builtins.code import code_run_unavailable_reason

            reason = code_run_unavailable_reason()
            if reason:
                raise BenchError(f"the sandbox cannot run here: {reason}")
            overhead = overhead_rows(arguments.runs)
            capacity = []
            for workload in arguments.workload:
                for count in arguments.concurrency:
                    log(f"capacity: {count} sandboxes at once, {workload}")
                    capacity.append(concurrency_row(count, workload))
    finally:
        shutil.rmtree(sandbox_root, ignore_errors=True)
    report(overhead, capacity, load_before, as_json=arguments.json)


def report(
    overhead: list[dict[str, Any]], capacity: list[dict[str, Any]], load_before: float, *, as_json: bool
) -> None:
    if as_json:
        print(json.dumps({"commit": git_commit(), "overhead": overhead, "capacity": capacity}, indent=2))
        return
    print(f"sandbox, commit {git_commit()}, {os.cpu_count()} CPUs")
    print(f"load average {load_before:.2f} before, {load_average():.2f} after\n")
    print("| print(1) | runs | median ms | p95 ms |\n|---|---:|---:|---:|")
    for row in overhead:
        print(f"| {row['what']} | {row['runs']} | {row['median_ms']:.1f} | {row['p95_ms']:.1f} |")
    print(f"\n| sandboxes at once ({SLEEP_SECONDS:g} s each) | workload | wall s | failures |", end="")
    print(" peak memory MB | per sandbox MB |")
    print("|---:|---|---:|---:|---:|---:|")
    for row in capacity:
        print(
            f"| {row['sandboxes']} | {row['workload']} | {row['wall_seconds']:.2f} | {row['failures']} | "
            f"{row['peak_memory_mb']:.0f} | {row['memory_per_sandbox_mb']:.1f} |"
        )


if __name__ == "__main__":
    main()

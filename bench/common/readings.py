"""Statistics, and the memory and CPU of processes read from /proc (no psutil)."""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

# --- Statistics -----------------------------------------------------------------------------------


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: list[float], fraction: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), ``fraction`` in [0, 1]."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    lower = int(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


# --- Memory from /proc ----------------------------------------------------------------------------


@dataclass(frozen=True)
class MemorySample:
    """Resident memory of a process tree. PSS shares pages between forked workers fairly; RSS counts
    shared pages once per process, so the RSS of a forked tree overstates what it really uses."""

    rss_bytes: int
    pss_bytes: int
    process_count: int

    @property
    def rss_mb(self) -> float:
        return self.rss_bytes / 1_048_576

    @property
    def pss_mb(self) -> float:
        return self.pss_bytes / 1_048_576


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int | str) -> list[str] | None:
    """Fields 3… of /proc/PID/stat; the command name may hold spaces and parentheses."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None  # the process ended meanwhile
    return stat.rsplit(")", 1)[1].split()


def _parent_pids() -> dict[int, int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat_fields(entry.name)) is not None:
            parents[int(entry.name)] = int(fields[1])
    return parents


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants that are alive now."""
    parents = _parent_pids()
    tree, frontier = [pid], [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, its_parent in parents.items() if its_parent == parent]
        tree.extend(children)
        frontier.extend(children)
    return [member for member in tree if member in parents]


def _status_kilobytes(path: Path, field_name: str) -> int:
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            if line.startswith(f"{field_name}:"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used so far."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS if fields else 0.0


def tree_cpu_seconds(pid: int) -> float:
    return sum(cpu_seconds(member) for member in process_tree(pid))


def cpu_seconds_with_exited_children(pid: int) -> float:
    """User + system CPU time of the process and of its children that have exited and been reaped."""
    fields = _stat_fields(pid)
    return sum(int(value) for value in fields[11:15]) / CLOCK_TICKS if fields else 0.0


def tree_cpu_seconds_with_exited(pid: int) -> float:
    """CPU time of a process tree, counting members that exited (a recycled worker) once reaped:
    a difference of two readings then holds their work too."""
    return sum(cpu_seconds_with_exited_children(member) for member in process_tree(pid))


def _command_name(pid: int | str) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def postgres_cpu_seconds() -> float | None:
    """CPU time of every PostgreSQL server on this machine (all databases, all clients), with the
    backends that have exited (counted in their postmaster); None when none runs here."""
    parents = _parent_pids()
    postmasters = [
        pid
        for pid, parent in parents.items()
        if _command_name(pid) == "postgres" and _command_name(parent) != "postgres"
    ]
    if not postmasters:
        return None
    return sum(tree_cpu_seconds_with_exited(pid) for pid in postmasters)


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, summed over CPUs."""
    values = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    total = sum(values[:8])  # guest time is already counted in user
    return (total - idle) / CLOCK_TICKS, total / CLOCK_TICKS


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def python_loop_ms(steps: int = 1_000_000, repeats: int = 5) -> float:
    """The median time of a plain Python loop of ``steps`` additions: a yardstick of the
    machine's single-core speed, so runs on different machines (or VMs of one kind, which
    differ) can be compared. Measured before the stack starts, on a quiet machine."""
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        total = 0
        for step in range(steps):
            total += step
        timings.append((time.perf_counter() - started) * 1000)
    return median(timings)


def tree_memory(pid: int) -> MemorySample:
    members = process_tree(pid)
    rss = sum(_status_kilobytes(Path(f"/proc/{member}/status"), "VmRSS") for member in members)
    pss = sum(_status_kilobytes(Path(f"/proc/{member}/smaps_rollup"), "Pss") for member in members)
    return MemorySample(rss_bytes=rss * 1024, pss_bytes=pss * 1024, process_count=len(members))

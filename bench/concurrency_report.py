"""bench/concurrency.py's markdown tables, from its JSON report."""

from __future__ import annotations

import statistics
from typing import Any

TIMING_HEADERS = (
    "scenario", "N", "POSTs accepted", "makespan s", "post → run.completed p50 s", "p95 s",
    "peak runs at once", "POST p50 ms", "POST p95 ms",
)  # fmt: skip
PHASE_HEADERS = (
    "scenario", "N", "last POST answered s", "POST answered → run.started p50 s", "run.started → end p50 s",
)  # fmt: skip
RESOURCE_HEADERS = (
    "scenario", "N", "RSS MB server + worker", "PSS MB server + worker", "peak PG connections",
    "CPU s/run server", "workers", "PostgreSQL", "client", "fake model", "rest of machine", "machine busy %",
    "load avg before",
)  # fmt: skip
CHECK_HEADERS = (
    "scenario", "N", "completed", "POST failed", "lost", "duplicated", "stuck", "failed",
    "store seq gaps / repeats", "store terminal ≠ 1", "socket seq gaps / repeats", "socket terminal ≠ 1",
    '"database is locked"', "tracebacks in logs",
)  # fmt: skip
ROUND_HEADERS = (
    "scenario", "N", "bursts", "makespan s", "POST p95 ms", "peak runs at once",
    "CPU ms/run server / workers / PostgreSQL",
)  # fmt: skip
CPU_SHOWN = ("server", "workers", "postgres")
CPU_PARTS = ("server", "workers", "postgres", "client", "fake_model", "rest_of_machine")
RUN_PROBLEMS = ("posts_failed", "runs_lost", "runs_duplicated", "runs_stuck", "runs_failed")


def _row(cells: list[str] | tuple[str, ...]) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(headers: tuple[str, ...], rows: list[list[str]]) -> list[str]:
    return [_row(headers), _row(["---", *["---:"] * (len(headers) - 1)]), *(_row(row) for row in rows)]


def _number(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None or value != value else f"{value:.{digits}f}"


def makespan_text(summary: dict[str, Any]) -> str:
    if summary["makespan_seconds"] is not None:
        return f"{summary['makespan_seconds']:.2f}"
    return (
        f"> {summary['timeout_seconds']:g} ({summary['runs_observed_done']}/{summary['runs_accepted']} done)"
    )


def _scenario(summary: dict[str, Any]) -> str:
    """The scenario, and which round its burst was in when there were several."""
    return f"{summary['scenario']} #{summary['round']}" if "round" in summary else summary["scenario"]


def _spread(values: list[float], digits: int) -> str:
    """Median, then the range: "7.81 (7.18 to 7.95)"."""
    if not values:
        return "n/a"
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f} to {max(values):.{digits}f})"


def round_rows(results: list[dict[str, Any]]) -> list[list[str]]:
    """One row per scenario and N over its rounds: medians and ranges; a burst that timed out has
    no makespan and is counted apart."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for summary in results:
        groups.setdefault((summary["scenario"], summary["n"]), []).append(summary)
    rows = []
    for (scenario, size), bursts in groups.items():
        makespans = [burst["makespan_seconds"] for burst in bursts if burst["makespan_seconds"] is not None]
        timed_out = len(bursts) - len(makespans)
        cpu = [_median_ms([burst["cpu_seconds_per_run"][part] for burst in bursts]) for part in CPU_SHOWN]
        rows.append([
            scenario,
            str(size),
            str(len(bursts)),
            _spread(makespans, 2) + (f", {timed_out} timed out" if timed_out else ""),
            _spread([burst["post_p95_ms"] for burst in bursts], 0),
            _spread([burst["peak_runs_at_once"] for burst in bursts], 0),
            " / ".join(cpu),
        ])  # fmt: skip
    return rows


def _median_ms(seconds: list[float | None]) -> str:
    """The median in milliseconds of what was measured (no PostgreSQL on the embedded default)."""
    measured = [value for value in seconds if value is not None]
    return f"{statistics.median(measured) * 1000:.0f}" if measured else "n/a"


def _timing_row(summary: dict[str, Any]) -> list[str]:
    return [
        _scenario(summary),
        str(summary["n"]),
        f"{summary['runs_accepted']}/{summary['n']}",
        makespan_text(summary),
        *[
            f"> {summary['timeout_seconds']:g}" if value is None else f"{value:.2f}"
            for value in (summary["post_to_completed_p50_seconds"], summary["post_to_completed_p95_seconds"])
        ],
        str(summary["peak_runs_at_once"]),
        _number(summary["post_p50_ms"], 0),
        _number(summary["post_p95_ms"], 0),
    ]


def _phase_row(summary: dict[str, Any]) -> list[str]:
    phases = summary["phases_seconds"]
    return [
        _scenario(summary),
        str(summary["n"]),
        _number(phases["last_post_answered"]),
        _number(phases["post_answered_to_started_p50"]),
        _number(phases["started_to_end_p50"]),
    ]


def _resource_row(summary: dict[str, Any]) -> list[str]:
    memory, connections = summary["memory_mb"], summary["postgres_connections"]
    peak = connections["peak"]
    return [
        _scenario(summary),
        str(summary["n"]),
        f"{memory['total_rss']:.0f} ({memory['server_rss']:.0f} + {memory['workers_rss']:.0f})",
        f"{memory['total_pss']:.0f} ({memory['server_pss']:.0f} + {memory['workers_pss']:.0f})",
        "n/a" if peak is None else f"{peak} (idle {connections['idle_before']})",
        *[_number(summary["cpu_seconds_per_run"][part], 3) for part in CPU_PARTS],
        f"{summary['machine_busy_percent']:.0f}",
        f"{summary['load_average_before']:.2f}",
    ]


def _check_row(summary: dict[str, Any]) -> list[str]:
    checks = summary["checks"]
    return [
        _scenario(summary),
        str(summary["n"]),
        f"{checks['runs_completed']}/{summary['n']}",
        *[str(checks[name]) for name in RUN_PROBLEMS],
        f"{checks['store_seq_gaps']} / {checks['store_seq_duplicates']}",
        str(checks["store_terminal_events_not_one"]),
        f"{checks['stream_seq_gaps']} / {checks['stream_seq_duplicates']}",
        str(checks["stream_terminal_events_not_one"]),
        str(sum(checks["database_locked_in_logs"].values())),
        str(sum(checks["tracebacks_in_logs"].values())),
    ]


def markdown_report(report: dict[str, Any]) -> str:
    results = report["results"]
    lines = [
        f"Concurrency, {report['mode']}: commit {report['commit']}, {report['cpus']} CPUs, one uvicorn"
        f" and one `manage.py worker` (RUN_CONCURRENCY={report['settings']['RUN_CONCURRENCY']}),"
        " every model call"
        f" answered after {report['model_delay_seconds']:g} s, a fresh stack per burst with"
        f" {report['warmup']} warm-up runs, active runs per member raised to"
        f" {report['tenant_limits']['active_runs_per_user']:,} (Tenant.settings),"
        f" {report['timeout_seconds']:g} s timeout per burst. Machine yardstick: a 1-million-step"
        f" Python loop takes {report['python_loop_ms']:.1f} ms.",
        "",
        "Makespan (release → the last accepted run's end at its socket) and post → run.completed are over"
        " the runs whose POST was accepted (202).",
        "",
        *_table(TIMING_HEADERS, [_timing_row(summary) for summary in results]),
        "",
        *(
            [
                f"Over the {report['rounds']} rounds (median, then the range):",
                "",
                *_table(ROUND_HEADERS, round_rows(results)),
                "",
            ]
            if report.get("rounds", 1) > 1
            else []
        ),
        "Where the makespan went (seconds after the release; medians over the runs; the socket's"
        " run.started marks the worker's claim):",
        "",
        *_table(PHASE_HEADERS, [_phase_row(summary) for summary in results]),
        "",
        "Resources over the burst (memory at its end; CPU seconds per run; PostgreSQL is every"
        " PostgreSQL process on the machine):",
        "",
        *_table(RESOURCE_HEADERS, [_resource_row(summary) for summary in results]),
        "",
        "Correctness (counts of what went wrong; all 0 is right):",
        "",
        *_table(CHECK_HEADERS, [_check_row(summary) for summary in results]),
    ]
    errors = [
        f"- {summary['scenario']} x {summary['n']}: {summary['checks']['first_post_error']}"
        for summary in results
        if summary["checks"]["first_post_error"]
    ]
    if errors:
        lines += ["", "First failed POST of each burst:", *errors]
    failures = [
        f"- {failure['scenario']} x {failure['n']}: {failure['error'][:300]}"
        for failure in report["failed_bursts"]
    ]
    if failures:
        lines += ["", "Bursts that could not be measured:", *failures]
    return "\n".join(lines)

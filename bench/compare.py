"""Two checkouts' code measured in turn, message by message: which one a user waits less for.

    .venv/bin/python bench/compare.py --baseline ../agentry-before \\
        --database-url postgres://postgres@127.0.0.1:5432/agentry_bench --redis-url redis://127.0.0.1:6379/3

The speed of a VM drifts by a third within minutes, so two runs of ``agent_turn.py`` minutes
apart can disagree by more than a change is worth. Here both checkouts run at once, each as
``agent_turn.py --drive`` (this checkout's bench; the baseline's code through
``BENCH_APP_ROOT``, with the same interpreter and packages), each with its own database
(``<name>_a``, ``<name>_b``), Redis database (the URL's, and the next one) and fake model. Their
messages alternate (A B, then B A, and so on), one at a time, so drift falls on both alike;
each message is timed as ``agent_turn.py``'s websocket observer times it (POST → ``run.completed``
at a subscribed client). The report gives each side's median and p95, and the median of the
paired differences (this minus baseline) with how many pairs this checkout won.

See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import BenchError, git_commit, log, median, percentile, python_loop_ms, stop_on_signals

AGENT_TURN = Path(__file__).resolve().parent / "agent_turn.py"
SCENARIOS = ("plain", "tool")


@dataclass
class Driver:
    """One checkout's stack, driven one message at a time through ``agent_turn.py --drive``."""

    label: str
    process: subprocess.Popen[str]
    samples: dict[str, list[float]] = field(default_factory=dict)

    def _lines(self) -> tuple[IO[str], IO[str]]:
        assert self.process.stdin is not None and self.process.stdout is not None
        return self.process.stdin, self.process.stdout

    def wait_until_ready(self) -> None:
        self._answer()

    def measure(self, scenario: str) -> None:
        commands, _answers = self._lines()
        commands.write(f"{scenario}\n")
        commands.flush()
        self.samples.setdefault(scenario, []).append(float(self._answer()["total_ms"]))

    def _answer(self) -> dict[str, Any]:
        _commands, answers = self._lines()
        line = answers.readline()
        if not line:
            raise BenchError(f"the {self.label} bench stopped (exit code {self.process.wait()}); see above")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def stop(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()  # the driver's input ends: it stops its stack and exits
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.terminate()
            self.process.wait()


def _suffixed_database(url: str, suffix: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"{parts.path.rstrip('/')}{suffix}"))


def _next_redis_database(url: str) -> str:
    parts = urlsplit(url)
    number = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{number + 1}"))


def start_driver(label: str, app_root: Path, arguments: argparse.Namespace, *, side: str) -> Driver:
    argv = [sys.executable, str(AGENT_TURN), "--drive", "--warmup", str(arguments.warmup)]
    argv += ["--scenarios", arguments.scenarios]
    if arguments.database_url:
        argv += ["--database-url", _suffixed_database(arguments.database_url, f"_{side}")]
    if arguments.redis_url:
        redis_url = arguments.redis_url if side == "a" else _next_redis_database(arguments.redis_url)
        argv += ["--redis-url", redis_url]
    for setting in arguments.set:
        argv += ["--set", setting]
    environment = {**os.environ, "BENCH_APP_ROOT": str(app_root)}
    process = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=environment
    )
    return Driver(label=label, process=process)


def alternate(this: Driver, baseline: Driver, scenarios: list[str], messages: int) -> None:
    for scenario in scenarios:
        for index in range(messages):
            pair = (this, baseline) if index % 2 == 0 else (baseline, this)
            for driver in pair:
                driver.measure(scenario)
            if (index + 1) % 25 == 0:
                log(f"compare: {scenario}: {index + 1}/{messages} pairs")


def summary(this: Driver, baseline: Driver, scenario: str) -> dict[str, Any]:
    ours, theirs = this.samples[scenario], baseline.samples[scenario]
    differences = [mine - other for mine, other in zip(ours, theirs, strict=True)]
    return {
        "scenario": scenario,
        "pairs": len(differences),
        "this_median_ms": round(median(ours), 2),
        "this_p95_ms": round(percentile(ours, 0.95), 2),
        "baseline_median_ms": round(median(theirs), 2),
        "baseline_p95_ms": round(percentile(theirs, 0.95), 2),
        "paired_difference_median_ms": round(median(differences), 2),
        "this_faster_pairs": sum(1 for difference in differences if difference < 0),
    }


def markdown_report(report: dict[str, Any]) -> str:
    lines = [
        f"This checkout ({report['this_commit']}) against {report['baseline']} ({report['baseline_commit']}),"
        f" {report['mode']}, messages alternating one by one. Machine yardstick: a 1-million-step"
        f" Python loop takes {report['python_loop_ms']} ms.",
        "",
        "| scenario | pairs | this median ms | this p95 ms | baseline median ms | baseline p95 ms"
        " | paired difference, median ms | this faster in |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in report["results"]:
        lines.append(
            f"| {row['scenario']} | {row['pairs']} | {row['this_median_ms']} | {row['this_p95_ms']}"
            f" | {row['baseline_median_ms']} | {row['baseline_p95_ms']}"
            f" | {row['paired_difference_median_ms']:+} | {row['this_faster_pairs']} of {row['pairs']} |"
        )
    return "\n".join(lines)


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline", required=True, help="the other checkout (a directory with manage.py)")
    parser.add_argument("--messages", type=int, default=100, help="pairs per scenario (default 100)")
    parser.add_argument("--warmup", type=int, default=5, help="messages per scenario and side not counted")
    parser.add_argument("--scenarios", default="plain,tool", help="comma-separated: plain,tool")
    parser.add_argument("--database-url", help="PostgreSQL URL; the sides use its name + _a and + _b")
    parser.add_argument("--redis-url", help="Redis URL; the baseline uses the next database number")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="as agent_turn.py")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the markdown table")
    arguments = parser.parse_args(argv)
    baseline = Path(arguments.baseline).resolve()
    if not (baseline / "manage.py").is_file():
        parser.error(f"--baseline {baseline} has no manage.py")
    if arguments.messages < 1 or arguments.warmup < 0:
        parser.error("--messages must be at least 1 and --warmup at least 0")
    if set(arguments.scenarios.split(",")) - set(SCENARIOS):
        parser.error(f"--scenarios takes {', '.join(SCENARIOS)}")
    arguments.baseline = baseline
    return arguments


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    scenarios = [name for name in SCENARIOS if name in arguments.scenarios.split(",")]
    here = Path(__file__).resolve().parent.parent
    yardstick_ms = python_loop_ms()
    drivers: list[Driver] = []
    try:
        with stop_on_signals():
            drivers.append(start_driver("this", here, arguments, side="a"))
            drivers.append(start_driver("baseline", arguments.baseline, arguments, side="b"))
            for driver in drivers:
                driver.wait_until_ready()
            alternate(drivers[0], drivers[1], scenarios, arguments.messages)
    except BenchError as error:
        log(f"compare failed: {error}")
        return 1
    except KeyboardInterrupt:
        log("compare interrupted; stopping both benches")
        return 130
    finally:
        for driver in drivers:
            driver.stop()
    report = {
        "benchmark": "compare",
        "this_commit": git_commit(),
        "baseline": str(arguments.baseline),
        "baseline_commit": _commit_of(arguments.baseline),
        "mode": "PostgreSQL + Redis" if arguments.database_url else "embedded (SQLite)",
        "python_loop_ms": round(yardstick_ms, 1),
        "results": [summary(drivers[0], drivers[1], scenario) for scenario in scenarios],
    }
    print(json.dumps(report, indent=2) if arguments.json else markdown_report(report))
    return 0


def _commit_of(checkout: Path) -> str:
    completed = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True, check=False
    )
    return completed.stdout.strip() or "unknown"


if __name__ == "__main__":
    sys.exit(main())

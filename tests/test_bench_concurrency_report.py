"""bench/concurrency.py's table over rounds: medians and ranges per scenario and N."""

from typing import Any

from bench.concurrency_report import round_rows


def burst(
    scenario: str, size: int, makespan: float | None, post_p95: float, peak: int, **cpu: Any
) -> dict[str, Any]:
    return {
        "scenario": scenario,
        "n": size,
        "makespan_seconds": makespan,
        "post_p95_ms": post_p95,
        "peak_runs_at_once": peak,
        "cpu_seconds_per_run": {"server": 0.012, "workers": 0.02, "postgres": None, **cpu},
    }


def test_each_scenario_and_size_gets_its_median_and_range_over_the_rounds() -> None:
    bursts = [
        burst("plain", 200, 7.95, 2710.0, 163, workers=0.024),
        burst("tool", 200, 12.42, 3683.0, 200),
        burst("plain", 200, 7.18, 2461.0, 182, workers=0.021),
        burst("tool", 200, None, 2892.0, 190),
        burst("plain", 200, 7.81, 3683.0, 169, workers=0.022),
    ]

    assert round_rows(bursts) == [
        [
            "plain",
            "200",
            "3",
            "7.81 (7.18 to 7.95)",
            "2710 (2461 to 3683)",
            "169 (163 to 182)",
            "12 / 22 / n/a",
        ],
        [
            "tool",
            "200",
            "2",
            "12.42 (12.42 to 12.42), 1 timed out",
            "3288 (2892 to 3683)",
            "195 (190 to 200)",
            "12 / 20 / n/a",
        ],
    ]

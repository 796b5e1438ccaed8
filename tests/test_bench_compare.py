"""``bench/compare.py``: where each side's stack goes, and how the pairs are summed up."""

from typing import Any

from bench.compare import Driver, _next_redis_database, _suffixed_database, summary


def _driver(label: str, totals: list[float]) -> Driver:
    process: Any = None  # summary reads samples only
    return Driver(label=label, process=process, samples={"plain": totals})


def test_each_side_gets_its_own_database_and_redis_database() -> None:
    url = "postgres://postgres@127.0.0.1:5432/agentry_bench"
    assert _suffixed_database(url, "_b") == "postgres://postgres@127.0.0.1:5432/agentry_bench_b"
    assert _next_redis_database("redis://127.0.0.1:6379/3") == "redis://127.0.0.1:6379/4"
    assert _next_redis_database("redis://127.0.0.1:6379") == "redis://127.0.0.1:6379/1"


def test_the_summary_pairs_messages_in_order() -> None:
    this = _driver("this", [10.0, 30.0, 20.0, 12.0])
    baseline = _driver("baseline", [12.0, 29.0, 25.0, 13.0])

    row = summary(this, baseline, "plain")

    # Differences: -2, +1, -5, -1 → median -1.5; this side faster in three pairs.
    assert (row["pairs"], row["paired_difference_median_ms"], row["this_faster_pairs"]) == (4, -1.5, 3)
    assert (row["this_median_ms"], row["baseline_median_ms"]) == (16.0, 19.0)

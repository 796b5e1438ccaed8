"""Shared parts of the benchmarks: a throwaway Agentry stack of real processes (``stack``), its
databases (``databases``), the processes and their signals (``processes``), statistics, memory
and CPU (``readings``).

A ``BenchStack`` creates a fresh database (an SQLite file in a temporary directory, or a dedicated
PostgreSQL database it creates and drops), migrates it, creates a tenant and an API key with
``manage.py create_tenant``, and starts uvicorn and ``manage.py worker`` (or bare ``manage.py qcluster``) as
subprocesses configured like production (DEBUG off, secrets set). Everything it started is stopped, and
everything it created is removed, when the ``with`` block ends, including on Ctrl-C or errors.
"""

from bench.common.databases import BenchDatabase, PostgresBenchDatabase, SqliteBenchDatabase
from bench.common.processes import BenchError, PipedProcess, free_port, git_commit, log, stop_on_signals
from bench.common.readings import (
    MemorySample,
    cpu_seconds,
    cpu_seconds_with_exited_children,
    load_average,
    machine_busy_seconds,
    median,
    percentile,
    postgres_cpu_seconds,
    python_loop_ms,
    tree_cpu_seconds,
    tree_cpu_seconds_with_exited,
)
from bench.common.stack import BENCH_TENANT_LIMITS, BENCH_THROTTLE_RATE, BenchStack, StackOptions

__all__ = [
    "BENCH_TENANT_LIMITS",
    "BENCH_THROTTLE_RATE",
    "BenchDatabase",
    "BenchError",
    "BenchStack",
    "MemorySample",
    "PipedProcess",
    "PostgresBenchDatabase",
    "SqliteBenchDatabase",
    "StackOptions",
    "cpu_seconds",
    "cpu_seconds_with_exited_children",
    "free_port",
    "git_commit",
    "load_average",
    "log",
    "machine_busy_seconds",
    "median",
    "percentile",
    "postgres_cpu_seconds",
    "python_loop_ms",
    "stop_on_signals",
    "tree_cpu_seconds",
    "tree_cpu_seconds_with_exited",
]

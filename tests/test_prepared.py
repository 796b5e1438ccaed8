"""The hot path's cursor: prepared, planned once, and still counted like any other query."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.prepared import prepared_cursor

pytestmark = pytest.mark.django_db

MARKED_STATEMENT = "SELECT %s + 1 AS prepared_cursor_probe"


def _run_marked_statement(value: int) -> int:
    with prepared_cursor() as cursor:
        cursor.execute(MARKED_STATEMENT, [value])
        (result,) = cursor.fetchone()
    return int(result)


def test_prepared_cursor_runs_statements_and_they_are_counted() -> None:
    with CaptureQueriesContext(connection) as queries:
        assert _run_marked_statement(41) == 42
        assert _run_marked_statement(1) == 2
    # PostgreSQL logs the statement as written (a prepared execution has no interpolated text).
    assert ["AS prepared_cursor_probe" in query["sql"] for query in queries.captured_queries] == [True, True]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="prepared statements are PostgreSQL's")
def test_postgresql_prepares_the_statement_once_per_connection_with_a_generic_plan() -> None:
    _run_marked_statement(1)
    _run_marked_statement(2)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE %s",
            ["%prepared\\_cursor\\_probe%"],
        )
        rows = cursor.fetchall()
        cursor.execute("SHOW plan_cache_mode")
        (plan_cache_mode,) = cursor.fetchone()
    assert rows == [("SELECT $1 + 1 AS prepared_cursor_probe", 2, 0)]
    assert plan_cache_mode == "force_generic_plan"


@pytest.mark.skipif(connection.vendor != "postgresql", reason="prepared statements are PostgreSQL's")
def test_orm_queries_are_never_prepared() -> None:
    from tenants.models import Tenant

    list(Tenant.objects.filter(slug="never-prepared"))
    list(Tenant.objects.filter(slug="never-prepared"))
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s", ["%never%"])
        (prepared_orm_queries,) = cursor.fetchone()
        cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s", ["%tenant%"])
        (prepared_tenant_queries,) = cursor.fetchone()
    assert (prepared_orm_queries, prepared_tenant_queries) == (0, 0)

"""The hot path's cursor: prepared, planned once, and still counted like any other query."""

import threading
from collections.abc import Iterator

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from psycopg.pq import TransactionStatus

from core.prepared import prepared_cursor, transaction_in_round_trips, write_in_one_transaction

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


@pytest.mark.skipif(connection.vendor != "postgresql", reason="pipelining is PostgreSQL's")
@pytest.mark.django_db(transaction=True)
def test_a_pipelined_read_runs_after_the_lock_before_it_and_sees_what_the_lock_waited_for() -> None:
    from tenants.models import Tenant

    tenant = Tenant.objects.create(slug="pipelined", name="before")
    holding, release = threading.Event(), threading.Event()

    def hold_the_row_and_rename() -> None:
        try:
            with transaction.atomic():
                Tenant.objects.select_for_update().filter(pk=tenant.pk).update(name="after")
                holding.set()
                release.wait(timeout=10)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_the_row_and_rename)
    holder.start()
    assert holding.wait(timeout=10)
    threading.Timer(0.3, release.set).start()  # commits while the pipeline waits for the lock
    table = Tenant._meta.db_table
    with transaction_in_round_trips() as round_trips:  # BEGIN, the lock and the read go out together
        locked, read = round_trips.run(
            [
                (f"SELECT id FROM {table} WHERE id = %s FOR UPDATE", [tenant.pk]),  # noqa: S608
                (f"SELECT name FROM {table} WHERE id = %s", [tenant.pk]),  # noqa: S608
            ]
        )
    holder.join(timeout=10)
    assert (locked, read) == ([(tenant.pk,)], [("after",)])


@pytest.fixture
def probe_table() -> Iterator[str]:
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE one_transaction_probe (id integer PRIMARY KEY)")
    yield "one_transaction_probe"
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE one_transaction_probe")


def _probe_ids() -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM one_transaction_probe ORDER BY id")
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.django_db(transaction=True)
def test_writes_in_one_transaction_each_see_the_one_before_and_commit_together(probe_table: str) -> None:
    with CaptureQueriesContext(connection) as queries:
        rows = write_in_one_transaction(
            [
                ("INSERT INTO one_transaction_probe (id) VALUES (%s) RETURNING id", [1]),
                (
                    "INSERT INTO one_transaction_probe (id) SELECT max(id) + 1 FROM one_transaction_probe"
                    " RETURNING id",
                    [],
                ),
            ]
        )

    assert rows == [[(1,)], [(2,)]]
    assert _probe_ids() == [1, 2]
    assert connection.get_autocommit()
    if connection.vendor == "postgresql":  # BEGIN and COMMIT travel with the statements, uncounted
        assert len(queries) == 2
        assert connection.connection.info.transaction_status == TransactionStatus.IDLE


@pytest.mark.django_db(transaction=True)
def test_a_failing_write_undoes_the_ones_before_it_and_leaves_the_connection_usable(probe_table: str) -> None:
    with pytest.raises(IntegrityError):
        write_in_one_transaction(
            [
                ("INSERT INTO one_transaction_probe (id) VALUES (%s) RETURNING id", [1]),
                ("INSERT INTO one_transaction_probe (id) VALUES (%s) RETURNING id", [1]),
                ("INSERT INTO one_transaction_probe (id) VALUES (%s) RETURNING id", [2]),
            ]
        )

    assert _probe_ids() == []
    if connection.vendor == "postgresql":
        assert connection.connection.info.transaction_status == TransactionStatus.IDLE
    assert write_in_one_transaction(
        [("INSERT INTO one_transaction_probe (id) VALUES (%s) RETURNING id", [3])]
    ) == [[(3,)]]


@pytest.mark.django_db(transaction=True)
def test_writes_in_one_transaction_inside_a_transaction_belong_to_it(probe_table: str) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        write_in_one_transaction([("INSERT INTO one_transaction_probe (id) VALUES (%s) RETURNING id", [1])])
        assert _probe_ids() == [1]
        raise RuntimeError("the surrounding transaction rolls back")

    assert _probe_ids() == []


@pytest.mark.django_db(transaction=True)
def test_a_transaction_in_round_trips_commits_only_with_its_committing_round_trip(probe_table: str) -> None:
    insert = "INSERT INTO one_transaction_probe (id) VALUES (%s) RETURNING id"
    with transaction_in_round_trips() as round_trips:
        first = round_trips.run([(insert, [1])])
        seen_inside = round_trips.run([("SELECT count(*) FROM one_transaction_probe", [])])
        committed = round_trips.run([(insert, [2])], commit=True)

    assert (first, seen_inside, committed) == ([[(1,)]], [[(1,)]], [[(2,)]])
    assert _probe_ids() == [1, 2]


@pytest.mark.django_db(transaction=True)
def test_leaving_a_transaction_in_round_trips_without_its_commit_rolls_it_back(probe_table: str) -> None:
    insert = "INSERT INTO one_transaction_probe (id) VALUES (%s) RETURNING id"
    with transaction_in_round_trips() as round_trips:
        round_trips.run([(insert, [1])])
    with pytest.raises(RuntimeError), transaction_in_round_trips() as round_trips:
        round_trips.run([(insert, [2])])
        raise RuntimeError("leaves before the commit")

    assert _probe_ids() == []
    if connection.vendor == "postgresql":
        assert connection.connection.info.transaction_status == TransactionStatus.IDLE

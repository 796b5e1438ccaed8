"""PostgreSQL connections bind parameters on the server and prepare the statements they repeat."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent
PRINT_OPTIONS = (
    "import django, json; django.setup(); from django.conf import settings; "
    "options = settings.DATABASES['default'].get('OPTIONS', {}); "
    "print(json.dumps({key: options.get(key) for key in ('server_side_binding', 'prepare_threshold')}))"
)


def database_options(tmp_path: Path, **environment: str) -> dict[str, object]:
    """The binding options settings give a PostgreSQL URL (nothing connects)."""
    env = {
        "PATH": os.environ["PATH"],
        "AGENTRY_DATA_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": "postgres://agentry@127.0.0.1:5432/agentry",
        **environment,
    }
    result = subprocess.run(
        [sys.executable, "-c", PRINT_OPTIONS], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    options: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return options


def test_postgresql_binds_on_the_server_and_prepares_a_statement_on_its_second_run(tmp_path: Path) -> None:
    assert database_options(tmp_path) == {"server_side_binding": True, "prepare_threshold": 1}


def test_prepared_statements_can_be_turned_off_for_a_transaction_pooler(tmp_path: Path) -> None:
    options = database_options(tmp_path, DATABASE_PREPARED_STATEMENTS="false")

    assert options == {"server_side_binding": None, "prepare_threshold": None}


@pytest.mark.skipif(connection.vendor != "postgresql", reason="prepared statements are PostgreSQL's")
@pytest.mark.django_db
def test_a_statement_run_twice_on_a_connection_is_prepared_there() -> None:
    statement = "SELECT %s::integer + 41 AS answer_of_the_prepared_statements_test"
    prepared = "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s"
    with connection.cursor() as cursor:
        cursor.execute(prepared, ["%answer_of_the_prepared_statements_test%"])
        before = cursor.fetchone()[0]
        cursor.execute(statement, [1])
        cursor.execute(prepared, ["%answer_of_the_prepared_statements_test%"])
        after_one = cursor.fetchone()[0]
        cursor.execute(statement, [1])
        answer = cursor.fetchone()[0]
        cursor.execute(prepared, ["%answer_of_the_prepared_statements_test%"])
        after_two = cursor.fetchone()[0]

    assert (before, after_one, answer, after_two) == (0, 0, 42, 1)

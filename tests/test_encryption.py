"""Secrets at rest: the raw columns hold only ciphertext, and keys rotate."""

from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from cryptography.fernet import Fernet, InvalidToken
from django.core.management import CommandError, call_command
from django.db import connection

from core.encryption import reset_cipher
from mcp_servers.models import McpServer
from tests.conftest import Cast
from tools.models import Tool

pytestmark = pytest.mark.django_db

OLD_KEY = Fernet.generate_key().decode()
NEW_KEY = Fernet.generate_key().decode()


@pytest.fixture(autouse=True)
def fresh_cipher(settings: Any) -> Iterator[None]:
    reset_cipher()
    yield
    reset_cipher()


def use_keys(settings: Any, *keys: str) -> None:
    settings.FIELD_ENCRYPTION_KEYS = list(keys)
    reset_cipher()


def raw_columns(model: Any, pk: Any, *columns: str) -> tuple[str, ...]:
    table = connection.ops.quote_name(model._meta.db_table)
    names = ", ".join(connection.ops.quote_name(column) for column in columns)
    pk_column = connection.ops.quote_name(model._meta.pk.column)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {names} FROM {table} WHERE {pk_column} = %s",  # noqa: S608 - quoted identifiers
            [model._meta.pk.get_db_prep_value(pk, connection)],
        )
        return tuple(cursor.fetchone())


def make_server(cast: Cast, name: str, token: str) -> McpServer:
    return McpServer.objects.create(  # type: ignore[misc]  # dict fields the stubs see as text
        tenant=cast.tenant_a,
        name=name,
        transport="streamable_http",
        url="https://mcp.example.com/mcp",
        token=token,
        headers={"X-Api-Key": f"{name}-header-secret"},
        env={"API_SECRET": f"{name}-env-secret"},
    )


def test_raw_columns_never_hold_the_plaintext(cast: Cast, settings: Any) -> None:
    use_keys(settings, NEW_KEY)
    server = make_server(cast, "demo", "plain-token-123")

    token, headers, env = raw_columns(McpServer, server.pk, "token", "headers", "env")

    assert "plain-token-123" not in token
    assert "demo-header-secret" not in headers
    assert "X-Api-Key" not in headers
    assert "demo-env-secret" not in env
    fernet = Fernet(NEW_KEY.encode())
    assert fernet.decrypt(token.encode()) == b"plain-token-123"
    assert fernet.decrypt(headers.encode()) == b'{"X-Api-Key": "demo-header-secret"}'
    assert fernet.decrypt(env.encode()) == b'{"API_SECRET": "demo-env-secret"}'
    reloaded = McpServer.objects.get(pk=server.pk)
    assert (reloaded.token, reloaded.headers, reloaded.env) == (
        "plain-token-123",
        {"X-Api-Key": "demo-header-secret"},
        {"API_SECRET": "demo-env-secret"},
    )


def test_empty_credentials_stay_empty(cast: Cast, settings: Any) -> None:
    use_keys(settings, NEW_KEY)
    server = McpServer.objects.create(
        tenant=cast.tenant_a, name="bare", transport="streamable_http", url="https://x.test/"
    )

    assert raw_columns(McpServer, server.pk, "token", "headers", "env") == ("", "", "")


def test_rotation_re_encrypts_every_secret_under_the_newest_key(cast: Cast, settings: Any) -> None:
    use_keys(settings, OLD_KEY)
    first = make_server(cast, "first", "first-token")
    second = make_server(cast, "second", "second-token")
    http_tool = Tool.objects.create(  # type: ignore[misc]
        tenant=cast.tenant_a,
        name="webhook",
        kind="http",
        secret_headers={"X-Key": "tool-secret"},
    )
    before = raw_columns(McpServer, first.pk, "token", "headers", "env")
    tool_before = raw_columns(Tool, http_tool.pk, "secret_headers")

    use_keys(settings, NEW_KEY, OLD_KEY)
    output = StringIO()
    call_command("rotate_encryption_keys", "--batch-size", "1", stdout=output)

    after = raw_columns(McpServer, first.pk, "token", "headers", "env")
    tool_after = raw_columns(Tool, http_tool.pk, "secret_headers")
    lines = output.getvalue().splitlines()
    assert "mcp_servers.McpServer.token: 2 re-encrypted, 0 already current, 0 undecryptable" in lines
    assert "mcp_servers.McpServer.headers: 2 re-encrypted, 0 already current, 0 undecryptable" in lines
    assert "mcp_servers.McpServer.env: 2 re-encrypted, 0 already current, 0 undecryptable" in lines
    assert "tools.Tool.secret_headers: 1 re-encrypted, 0 already current, 0 undecryptable" in lines
    assert all(old != new for old, new in zip(before, after, strict=True))
    assert tool_before != tool_after
    with pytest.raises(InvalidToken):
        Fernet(OLD_KEY.encode()).decrypt(after[0].encode())

    use_keys(settings, NEW_KEY)
    assert McpServer.objects.get(pk=first.pk).token == "first-token"
    assert McpServer.objects.get(pk=second.pk).headers == {"X-Api-Key": "second-header-secret"}
    assert McpServer.objects.get(pk=second.pk).env == {"API_SECRET": "second-env-secret"}
    assert Tool.objects.get(pk=http_tool.pk).secret_headers == {"X-Key": "tool-secret"}


def test_rotation_run_twice_changes_nothing_the_second_time(cast: Cast, settings: Any) -> None:
    use_keys(settings, OLD_KEY)
    server = make_server(cast, "demo", "demo-token")
    use_keys(settings, NEW_KEY, OLD_KEY)
    call_command("rotate_encryption_keys", stdout=StringIO())
    rotated = raw_columns(McpServer, server.pk, "token", "headers", "env")

    output = StringIO()
    call_command("rotate_encryption_keys", stdout=output)

    assert raw_columns(McpServer, server.pk, "token", "headers", "env") == rotated
    assert "mcp_servers.McpServer.token: 0 re-encrypted, 1 already current, 0 undecryptable" in (
        output.getvalue().splitlines()
    )


def test_rotation_reports_values_no_key_can_decrypt_and_rotates_the_rest(cast: Cast, settings: Any) -> None:
    lost_key = Fernet.generate_key().decode()
    use_keys(settings, lost_key)
    lost = make_server(cast, "lost", "lost-token")
    use_keys(settings, OLD_KEY)
    kept = make_server(cast, "kept", "kept-token")
    lost_raw = raw_columns(McpServer, lost.pk, "token")

    use_keys(settings, NEW_KEY, OLD_KEY)
    output = StringIO()
    with pytest.raises(CommandError, match="3 values cannot be decrypted with the configured keys"):
        call_command("rotate_encryption_keys", stdout=output)

    assert "mcp_servers.McpServer.token: 1 re-encrypted, 0 already current, 1 undecryptable" in (
        output.getvalue().splitlines()
    )
    assert raw_columns(McpServer, lost.pk, "token") == lost_raw
    use_keys(settings, NEW_KEY)
    assert McpServer.objects.get(pk=kept.pk).token == "kept-token"


def test_dry_run_writes_nothing(cast: Cast, settings: Any) -> None:
    use_keys(settings, OLD_KEY)
    server = make_server(cast, "demo", "demo-token")
    before = raw_columns(McpServer, server.pk, "token", "headers", "env")
    use_keys(settings, NEW_KEY, OLD_KEY)
    output = StringIO()

    call_command("rotate_encryption_keys", "--dry-run", stdout=output)

    assert raw_columns(McpServer, server.pk, "token", "headers", "env") == before
    assert "Total: would re-encrypt 3, 0 already current, 0 undecryptable." in output.getvalue().splitlines()

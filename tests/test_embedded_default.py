"""The embedded default with no environment at all: no debug pages, static files served, secrets
generated into the data folder, and everything in that folder private to its owner."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.live import ROOT

# One request and one write of each kind, in a process configured by nothing but its data folder.
VISIT = """
import json
import django
django.setup()
from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.test import Client
from core.encryption import encrypt

missing = Client().get("/no-such-page/")
static = Client().get("/static/css/app.css")
with connection.cursor() as cursor:
    cursor.execute("CREATE TABLE IF NOT EXISTS visit (id integer)")
    cursor.execute("INSERT INTO visit VALUES (1)")
cache.set("visit", 1)
encrypt("a secret")
# While the connection is open: SQLite removes its WAL and shared-memory files when it closes.
modes = {
    str(path.relative_to(settings.DATA_DIR)): oct(path.stat().st_mode & 0o777)
    for path in [settings.DATA_DIR, *settings.DATA_DIR.rglob("*")]
}
print(settings.DEBUG, missing.status_code, static.status_code)
print(json.dumps(modes))
print(missing.content.decode())
"""


def visit_embedded_default(data_dir: Path, sandbox_root: Path) -> subprocess.CompletedProcess[str]:
    environment = {
        "PATH": os.environ["PATH"],
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "AGENTRY_DATA_DIR": str(data_dir),
        "SANDBOX_ROOT": str(sandbox_root),
        "SANDBOX_PYTHON_DIR": str(sandbox_root.parent / "sandbox-python"),
    }
    return subprocess.run(
        [sys.executable, "-c", VISIT], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=60
    )


def mode_of(path: Path) -> str:
    return oct(path.stat().st_mode & 0o777)


def modes_seen(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    seen: dict[str, str] = json.loads(result.stdout.split("\n")[1])
    return seen


def test_an_unknown_page_is_the_sites_own_404_not_the_debug_page(tmp_path: Path) -> None:
    result = visit_embedded_default(tmp_path / "data", tmp_path / "sandbox")
    summary, _, page = result.stdout.split("\n", 2)

    assert result.returncode == 0, result.stderr
    assert summary == "False 404 200"
    assert "Using the URLconf defined in" not in page
    assert "<title>Not found · Agentry</title>" in page


def test_the_data_folder_and_what_it_holds_are_private_to_their_owner(tmp_path: Path) -> None:
    data = tmp_path / "data"

    result = visit_embedded_default(data, tmp_path / "sandbox")

    assert result.returncode == 0, result.stderr
    seen = modes_seen(result)
    cache_files = [name for name in seen if name.startswith("cache/")]
    assert len(cache_files) == 1
    assert seen == {
        ".": "0o700",
        "agentry.sqlite3": "0o600",
        "agentry.sqlite3-wal": "0o600",
        "agentry.sqlite3-shm": "0o600",
        "secret.key": "0o600",
        "dev-encryption.key": "0o600",
        "cache": "0o700",
        cache_files[0]: "0o600",
        "files": "0o700",
    }


def test_an_open_data_folder_left_by_an_older_version_is_closed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    (data / "agentry.sqlite3").touch(mode=0o644)

    result = visit_embedded_default(data, tmp_path / "sandbox")

    assert result.returncode == 0, result.stderr
    assert (mode_of(data), mode_of(data / "agentry.sqlite3")) == ("0o700", "0o600")


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the sandbox as another uid")
def test_as_root_the_sandbox_may_pass_through_the_data_folder_to_its_workspaces(tmp_path: Path) -> None:
    data = tmp_path / "data"

    result = visit_embedded_default(data, data / "sandbox")

    assert result.returncode == 0, result.stderr
    assert mode_of(data) == "0o711"
    assert mode_of(data / "agentry.sqlite3") == "0o600"

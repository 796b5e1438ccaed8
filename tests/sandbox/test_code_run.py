"""What people use code_run for: data in the workspace, charts in output/, a workspace per session."""

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from django.core.files.base import ContentFile

from files.models import StoredFile
from sessions.models import Session
from tests.factories import make_agent, make_tenant
from tests.sandbox.conftest import make_context, run_python, run_shell, stdout_of
from tools.builtins.base import ToolContext
from tools.builtins.code import code_run_unavailable_reason
from tools.sandbox.workspaces import session_workspace_path

CHART_CODE = """
import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [2, 4, 1])
plt.savefig("output/chart.png")
print("saved")
"""


def test_pandas_reads_a_csv_in_the_workspace(context: ToolContext) -> None:
    run_shell("printf 'city,people\\nOslo,709000\\nBergen,291000\\n' > cities.csv", context)

    result = run_python("import pandas\nprint(pandas.read_csv('cities.csv')['people'].sum())", context)

    assert stdout_of(result) == "1000000"


def test_a_matplotlib_chart_in_output_is_listed(context: ToolContext) -> None:
    result = run_python(CHART_CODE, context)

    chart = session_workspace_path(context.tenant_id, context.session_id) / "output" / "chart.png"
    assert stdout_of(result) == "saved"
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result.endswith(
        "files in output/ (shown to the user with download links):\n"
        f"- chart.png (image/png, {chart.stat().st_size:,} bytes)"
    )


def test_output_is_emptied_at_each_call_and_the_rest_is_kept(context: ToolContext) -> None:
    run_shell("echo kept > notes.txt; echo once > output/once.txt", context)

    result = run_shell("cat notes.txt; ls output | wc -l", context)

    assert stdout_of(result) == "kept\n0"


def test_folders_and_links_inside_the_workspace_are_kept_between_calls(context: ToolContext) -> None:
    first = run_shell(
        "mkdir -p data/raw && echo 1 > data/raw/a.txt && ln -s data/raw/a.txt relative "
        "&& ln -s /workspace/data/raw/a.txt absolute && ln -s /etc/passwd out",
        context,
    )

    result = run_shell("cat relative absolute; ls", context)

    assert first.endswith("stderr:\nnot kept: out: a link out of /workspace")
    assert stdout_of(result) == "1\n1\nabsolute\nattachments\ndata\noutput\nrelative"


def test_sessions_have_separate_workspaces(context: ToolContext) -> None:
    other = make_context(tenant_id=context.tenant_id)
    run_shell("echo mine > notes.txt", context)

    result = run_shell("ls notes.txt 2>&1 || true", other)

    assert stdout_of(result) == "ls: cannot access 'notes.txt': No such file or directory"


@pytest.mark.django_db
def test_deleting_a_session_removes_its_workspace(django_capture_on_commit_callbacks: Any) -> None:
    tenant = make_tenant("sandbox-tenant")
    session = Session.objects.create(tenant=tenant, agent=make_agent(tenant=tenant))
    context = replace(make_context(tenant_id=tenant.pk), session_id=session.pk)
    run_shell("echo x > notes.txt", context)
    workspace = session_workspace_path(tenant.pk, session.pk)
    assert workspace.is_dir()

    with django_capture_on_commit_callbacks(execute=True):
        session.delete()

    assert not workspace.exists()
    assert list(workspace.parent.iterdir()) == []  # nor the call's inputs beside it


def test_code_run_is_unavailable_without_the_sandbox_python(settings: Any, tmp_path: Path) -> None:
    settings.SANDBOX_PYTHON_DIR = tmp_path / "missing"

    assert code_run_unavailable_reason() == (
        f"the sandbox Python is not built at {tmp_path / 'missing'}: "
        "run `make sandbox-python` (needs /usr/bin/python3 and access to PyPI)"
    )


def test_outputs_become_artifacts_of_the_run(context: ToolContext) -> None:
    result = run_python(CHART_CODE, context)

    chart = StoredFile.objects.get(run_id=context.run_id)
    assert (chart.purpose, chart.name, chart.content_type, chart.tool_call_id) == (
        "artifact",
        "chart.png",
        "image/png",
        context.tool_call_id,
    )
    assert f"- chart.png (image/png, {chart.size:,} bytes)" in result


def test_the_sessions_attachments_are_in_the_workspace(context: ToolContext) -> None:
    for name, data in (("cities.csv", b"city,people\nGhent,3\nLiege,4\n"), ("cities.csv", b"x\n")):
        StoredFile.objects.create(
            tenant_id=context.tenant_id,
            session_id=context.session_id,
            purpose="attachment",
            name=name,
            content_type="text/csv",
            size=len(data),
            sha256="0" * 64,
            blob=ContentFile(data, name=name),
            status="ready",
        )

    result = run_python(
        "import os, pandas\nprint(sorted(os.listdir('attachments')))\n"
        "print(pandas.read_csv('attachments/cities.csv')['people'].sum())",
        context,
    )

    assert stdout_of(result) == "['cities (2).csv', 'cities.csv']\n7"


def test_odd_entries_do_not_stop_the_rest_of_the_workspace_being_kept(context: ToolContext) -> None:
    first = run_shell(
        "printf a > \"$(printf 'line\\nbreak')\" && printf b > \"$(printf 'latin\\351')\" "
        "&& mkfifo pipe && printf c > locked && chmod 000 locked && echo d > plain.txt",
        context,
    )

    result = run_shell("ls -q | wc -l; cat plain.txt; test -e pipe || echo no pipe", context)

    assert first.endswith("stderr:\nnot kept: locked: Permission denied")
    # The two odd names and plain.txt, with attachments/ and output/: not the fifo or the locked file.
    assert stdout_of(result) == "5\nd\nno pipe"

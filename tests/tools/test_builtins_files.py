"""The per-agent workspace tools: file_list, file_read, file_write, file_edit."""

import uuid
from typing import Any

import pytest

from agents.models import Agent
from tests.conftest import Cast
from tests.factories import make_agent, make_run
from tools.builtins.base import ToolContext, ToolError
from tools.builtins.workspace_files import run_file_edit, run_file_list, run_file_read, run_file_write
from tools.models import WorkspaceFile

pytestmark = pytest.mark.django_db


def context_for(agent: Agent, *, tenant_id: uuid.UUID | None = None) -> ToolContext:
    # A real run: each file_write keeps a snapshot as the run's artifact.
    run = make_run(agent=agent, user=None)
    return ToolContext(
        tenant_id=tenant_id or agent.tenant_id,
        agent_id=agent.pk,
        session_id=run.session_id,
        run_id=run.pk,
        user_id=None,
        user_role="member",
    )


@pytest.fixture
def agent(cast: Cast) -> Agent:
    return make_agent(tenant=cast.tenant_a, name="writer")


def stored(agent: Agent) -> dict[str, str]:
    return dict(WorkspaceFile.objects.filter(agent=agent).values_list("path", "content"))


def test_write_read_and_overwrite(agent: Agent) -> None:
    context = context_for(agent)
    assert run_file_write({"path": "notes/plan.md", "content": "step one\n"}, context) == (
        "created notes/plan.md (9 bytes); shown to the user as a download (plan.md)"
    )
    assert run_file_read({"path": "notes/plan.md"}, context) == "step one\n"
    assert (
        run_file_write({"path": "notes/plan.md", "content": "étape"}, context)
        == "replaced notes/plan.md (6 bytes); shown to the user as a download (plan.md)"
    )
    assert stored(agent) == {"notes/plan.md": "étape"}


def test_paths_are_normalized_inside_the_workspace(agent: Agent) -> None:
    context = context_for(agent)
    run_file_write({"path": "/notes//./todo.md", "content": "x"}, context)
    assert stored(agent) == {"notes/todo.md": "x"}
    assert run_file_read({"path": "notes/todo.md"}, context) == "x"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("../etc/passwd", "'..' is not allowed in a path: paths are relative to the workspace root"),
        ("notes/../../secret", "'..' is not allowed in a path: paths are relative to the workspace root"),
        ("/..", "'..' is not allowed in a path: paths are relative to the workspace root"),
        ("notes\\..\\x", "use '/' to separate folders in a path"),
        ("a\x00b", "path must not contain control characters"),
        ("line\nbreak", "path must not contain control characters"),
        ("/", "path must name a file"),
        ("./.", "path must name a file"),
        ("a/" + "b" * 256, "each part of a path must be at most 255 characters"),
        ("/".join(["d" * 200] * 3), "path must be at most 500 characters"),
    ],
)
def test_bad_paths_are_refused(agent: Agent, path: str, message: str) -> None:
    with pytest.raises(ToolError) as failed:
        run_file_write({"path": path, "content": "x"}, context_for(agent))
    assert str(failed.value) == message
    assert stored(agent) == {}


def test_list_shows_files_and_filters_by_folder(agent: Agent) -> None:
    context = context_for(agent)
    assert run_file_list({}, context) == "the workspace is empty"
    for path, content in [
        ("b.txt", "bb"),
        ("notes/a.md", "a"),
        ("notes/deep/c.md", "ccc"),
        ("notesx.md", "n"),
    ]:
        run_file_write({"path": path, "content": content}, context)
    listing = run_file_list({}, context).splitlines()
    assert listing[0] == "4 file(s):"
    assert [line.split("  (")[0] for line in listing[1:]] == [
        "b.txt",
        "notes/a.md",
        "notes/deep/c.md",
        "notesx.md",
    ]
    assert listing[1].startswith("b.txt  (2 characters, updated ")
    folder = run_file_list({"folder": "/notes/"}, context).splitlines()
    assert [line.split("  (")[0] for line in folder] == ["2 file(s):", "notes/a.md", "notes/deep/c.md"]
    assert run_file_list({"folder": "empty"}, context) == "no files under empty/"


def test_read_a_range_of_lines(agent: Agent) -> None:
    context = context_for(agent)
    run_file_write({"path": "poem.txt", "content": "one\ntwo\nthree\nfour\n"}, context)
    assert run_file_read({"path": "poem.txt", "start_line": 2, "line_count": 2}, context) == (
        "two\nthree\n\n[lines 2-3 of 4; call file_read with start_line=4 to read on]"
    )
    assert run_file_read({"path": "poem.txt", "start_line": 4}, context) == "four\n"
    with pytest.raises(ToolError) as failed:
        run_file_read({"path": "poem.txt", "start_line": 9}, context)
    assert str(failed.value) == "start_line 9 is past the end of poem.txt (4 lines)"


def test_read_a_missing_file(agent: Agent) -> None:
    with pytest.raises(ToolError) as failed:
        run_file_read({"path": "nope.txt"}, context_for(agent))
    assert str(failed.value) == "nope.txt does not exist (use file_list to see the workspace)"


def test_edit_replaces_exactly_one_occurrence(agent: Agent) -> None:
    context = context_for(agent)
    run_file_write({"path": "app.py", "content": "x = 1\ny = 2\nx = 1\n"}, context)
    with pytest.raises(ToolError) as failed:
        run_file_edit({"path": "app.py", "old_text": "x = 1", "new_text": "x = 3"}, context)
    assert str(failed.value) == "old_text occurs 2 times in app.py; add surrounding text so it matches once"
    with pytest.raises(ToolError) as failed:
        run_file_edit({"path": "app.py", "old_text": "z = 9", "new_text": "z = 0"}, context)
    assert str(failed.value) == (
        "old_text was not found in app.py; it must match exactly, including whitespace and newlines"
    )
    assert stored(agent) == {"app.py": "x = 1\ny = 2\nx = 1\n"}
    assert run_file_edit({"path": "app.py", "old_text": "y = 2\nx", "new_text": "y = 5\nw"}, context) == (
        "edited app.py (18 bytes)"
    )
    assert stored(agent) == {"app.py": "x = 1\ny = 5\nw = 1\n"}


def test_edit_a_missing_file(agent: Agent) -> None:
    with pytest.raises(ToolError) as failed:
        run_file_edit({"path": "ghost.md", "old_text": "a", "new_text": "b"}, context_for(agent))
    assert str(failed.value) == "ghost.md does not exist (use file_list to see the workspace)"


def test_agents_do_not_see_each_others_files(cast: Cast, agent: Agent) -> None:
    neighbour = make_agent(tenant=cast.tenant_a, name="neighbour")
    stranger = make_agent(tenant=cast.tenant_b, name="stranger")
    run_file_write({"path": "secret.txt", "content": "mine"}, context_for(agent))
    for other in (neighbour, stranger):
        assert run_file_list({}, context_for(other)) == "the workspace is empty"
        with pytest.raises(ToolError) as failed:
            run_file_read({"path": "secret.txt"}, context_for(other))
        assert str(failed.value) == "secret.txt does not exist (use file_list to see the workspace)"
        with pytest.raises(ToolError):
            run_file_edit(
                {"path": "secret.txt", "old_text": "mine", "new_text": "theirs"}, context_for(other)
            )
        run_file_write({"path": "secret.txt", "content": f"{other.name}'s own"}, context_for(other))
    assert stored(agent) == {"secret.txt": "mine"}
    assert stored(neighbour) == {"secret.txt": "neighbour's own"}
    assert stored(stranger) == {"secret.txt": "stranger's own"}


def test_another_tenants_context_cannot_reach_an_agents_workspace(cast: Cast, agent: Agent) -> None:
    run_file_write({"path": "secret.txt", "content": "mine"}, context_for(agent))
    foreign = context_for(agent, tenant_id=cast.tenant_b.pk)
    assert run_file_list({}, foreign) == "the workspace is empty"
    with pytest.raises(ToolError) as failed:
        run_file_write({"path": "planted.txt", "content": "x"}, foreign)
    assert str(failed.value) == "this run's agent no longer exists"
    assert stored(agent) == {"secret.txt": "mine"}


def test_a_run_without_an_agent_has_no_workspace(cast: Cast) -> None:
    context = ToolContext(
        tenant_id=cast.tenant_a.pk,
        agent_id=None,
        session_id=uuid.uuid4(),
        run_id=uuid.uuid4(),
        user_id=None,
        user_role="member",
    )
    with pytest.raises(ToolError) as failed:
        run_file_list({}, context)
    assert str(failed.value) == "workspace files belong to an agent, and this run has none"


def test_file_size_is_capped_for_writes_and_edits(agent: Agent, settings: Any) -> None:
    settings.WORKSPACE_MAX_FILE_BYTES = 10
    context = context_for(agent)
    with pytest.raises(ToolError) as failed:
        run_file_write({"path": "big.txt", "content": "é" * 6}, context)
    assert str(failed.value) == "file would be 12 bytes; the limit is 10 bytes"
    run_file_write({"path": "small.txt", "content": "0123456789"}, context)
    with pytest.raises(ToolError) as failed:
        run_file_edit({"path": "small.txt", "old_text": "9", "new_text": "9!"}, context)
    assert str(failed.value) == "file would be 11 bytes; the limit is 10 bytes"
    assert stored(agent) == {"small.txt": "0123456789"}


def test_nul_characters_are_refused(agent: Agent) -> None:
    with pytest.raises(ToolError) as failed:
        run_file_write({"path": "bin.dat", "content": "a\x00b"}, context_for(agent))
    assert str(failed.value) == "file content must not contain NUL characters"


def test_the_number_of_files_is_capped(agent: Agent, settings: Any) -> None:
    settings.WORKSPACE_MAX_FILES = 2
    context = context_for(agent)
    run_file_write({"path": "one", "content": "1"}, context)
    run_file_write({"path": "two", "content": "2"}, context)
    with pytest.raises(ToolError) as failed:
        run_file_write({"path": "three", "content": "3"}, context)
    assert str(failed.value) == "the workspace already holds 2 files, the limit; overwrite one instead"
    assert run_file_write({"path": "two", "content": "22"}, context) == (
        "replaced two (2 bytes); shown to the user as a download (two)"
    )
    assert stored(agent) == {"one": "1", "two": "22"}

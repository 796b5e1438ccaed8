"""The conversation tree's rules (sessions.branches), on plain data; and the migration to one branch."""

import importlib
from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4

import pytest
from django.apps import apps

from sessions.branches import ConversationTree, TreeNode
from sessions.models import CompactionSnapshot, Message, Run, Session
from tests.conftest import Cast
from tests.factories import make_agent
from web.chat_branches import pending_answer_branch

START = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


class Tree:
    """Builds nodes in time order: each call is one second after the last."""

    def __init__(self) -> None:
        self.nodes: list[TreeNode] = []
        self.names: dict[UUID, str] = {}

    def add(self, name: str, parent: UUID | None, role: str = "user", **fields: object) -> UUID:
        node_id = uuid4()
        placed = fields.pop("placed", True)
        self.nodes.append(
            TreeNode(
                id=node_id,
                parent_id=parent,
                position=len(self.nodes) + 1 if placed else None,
                role=role,
                created_at=START + timedelta(seconds=len(self.nodes)),
                **fields,  # type: ignore[arg-type]
            )
        )
        self.names[node_id] = name
        return node_id

    def at(self, seconds: int) -> datetime:
        return START + timedelta(seconds=seconds)

    def path(self, through: UUID | None = None) -> list[str]:
        return [self.names[node] for node in ConversationTree(self.nodes).path(through)]


def test_the_path_follows_the_newest_replies_from_the_message_shown() -> None:
    tree = Tree()
    q1 = tree.add("Q1", None, latest_run_at=tree.at(0))
    a1 = tree.add("A1", q1, "assistant")
    q2 = tree.add("Q2", a1, latest_run_at=tree.at(2))
    tree.add("A2", q2, "assistant")
    q2b = tree.add("Q2b", a1, latest_run_at=tree.at(4))
    tree.add("A2b", q2b, "assistant")

    assert tree.path() == ["Q1", "A1", "Q2b", "A2b"]
    assert tree.path(q2) == ["Q1", "A1", "Q2", "A2"]
    assert tree.path(a1) == ["Q1", "A1", "Q2b", "A2b"]
    info = ConversationTree(tree.nodes).branch_info(q2)
    assert (info.branch_index, info.branch_count, info.sibling_ids) == (1, 2, [q2, q2b])
    assert (info.previous_id, info.next_id) == (None, q2b)


def test_a_message_whose_newest_run_has_not_answered_yet_ends_the_path() -> None:
    tree = Tree()
    q1 = tree.add("Q1", None, latest_run_at=tree.at(9), is_pending=True)
    tree.add("A1", q1, "assistant")

    assert tree.path(q1) == ["Q1"]


def test_queued_messages_follow_the_path_they_were_posted_on() -> None:
    tree = Tree()
    q1 = tree.add("Q1", None, latest_run_at=tree.at(0), is_pending=True)
    a1 = tree.add("A1 calls a tool", q1, "assistant", is_pending=True)
    queued = tree.add("Q2", a1, placed=False, latest_run_at=tree.at(2))
    tree.add("tool result", a1, "tool", is_pending=True)

    assert tree.path() == ["Q1", "A1 calls a tool", "tool result", "Q2"]
    info = ConversationTree(tree.nodes).branch_info(queued)
    assert (info.branch_index, info.branch_count) == (1, 1)


def test_a_queued_edit_is_a_sibling_at_once() -> None:
    tree = Tree()
    q1 = tree.add("Q1", None, latest_run_at=tree.at(0))
    tree.add("A1", q1, "assistant")
    edit = tree.add("Q1 edited", None, placed=False, latest_run_at=tree.at(2))

    info = ConversationTree(tree.nodes).branch_info(edit)
    assert (info.branch_index, info.branch_count, info.sibling_ids) == (2, 2, [q1, edit])
    assert tree.path(edit) == ["Q1 edited"]
    assert tree.path(q1) == ["Q1", "A1"]


def test_the_first_message_of_an_empty_conversation_shows_while_queued() -> None:
    tree = Tree()
    tree.add("Q1", None, placed=False, latest_run_at=tree.at(0), is_pending=True)

    assert tree.path() == ["Q1"]


def test_a_long_conversation_is_walked_to_its_first_message() -> None:
    tree = Tree()
    parent = None
    for turn in range(2_000):
        question = tree.add(f"Q{turn}", parent, latest_run_at=tree.at(2 * turn))
        parent = tree.add(f"A{turn}", question, "assistant")

    path = tree.path(parent)

    assert len(path) == 4_000
    assert (path[0], path[-1]) == ("Q0", "A1999")


def test_parent_links_that_loop_end_the_walk() -> None:
    first, second = uuid4(), uuid4()
    nodes = [
        TreeNode(id=first, parent_id=second, position=1, role="user", created_at=START),
        TreeNode(id=second, parent_id=first, position=2, role="assistant", created_at=START),
    ]

    assert ConversationTree(nodes).ancestors(second) == [first, second]


@pytest.mark.django_db
def test_the_migration_links_existing_messages_into_one_branch(cast: Cast) -> None:
    agent = make_agent(tenant=cast.tenant_a)
    session = Session.objects.create(tenant=cast.tenant_a, agent=agent, created_by=cast.bob)
    planner = Run.objects.create(tenant=cast.tenant_a, session=session, agent=agent, status="completed")
    executor = Run.objects.create(
        tenant=cast.tenant_a, session=session, agent=agent, status="completed", parent_run=planner
    )

    def say(position: int | None, run: Run | None = None) -> Message:
        return Message.objects.create(
            tenant=cast.tenant_a, session=session, position=position, role="user", run=run, content=[]
        )

    first, second, executors, third, queued = (
        say(1),
        say(2, planner),
        say(3, executor),
        say(4, planner),
        say(None),
    )
    snapshot = CompactionSnapshot.objects.create(
        tenant=cast.tenant_a,
        session=session,
        reason="threshold",
        replaces_up_to_position=3,
        tokens_before=1,
        tokens_after=1,
        messages_before=1,
        messages_after=1,
    )
    migration = importlib.import_module("sessions.migrations.0012_existing_sessions_become_one_branch")

    migration.link_messages(apps, None)

    parents = dict(Message.objects.values_list("pk", "parent_id"))
    assert parents == {
        first.pk: None,
        second.pk: first.pk,
        executors.pk: None,
        third.pk: second.pk,
        queued.pk: third.pk,
    }
    snapshot.refresh_from_db()
    assert snapshot.replaces_up_to_position == 2
    migration.unlink_messages(apps, None)
    assert set(Message.objects.values_list("parent_id", flat=True)) == {None}


@pytest.mark.parametrize("has_stored_its_answer", [False, True])
def test_a_regenerated_answer_still_running_counts_once(has_stored_its_answer: bool) -> None:
    tree = Tree()
    question = tree.add("Q", None, latest_run_at=tree.at(3))
    first_run, second_run = Run(id=uuid4()), Run(id=uuid4())
    first = tree.add("A1", question, role="assistant", run_id=first_run.pk)
    if has_stored_its_answer:
        tree.add("A2", question, role="assistant", run_id=second_run.pk, is_pending=True)

    branch = pending_answer_branch(ConversationTree(tree.nodes), question, second_run)

    assert branch is not None
    assert (branch.branch_index, branch.branch_count, branch.sibling_ids) == (2, 2, [first, second_run.pk])

"""A conversation's branches: its messages form a tree, people see one path through it.

Each message names its ``parent``: the message it follows. Regenerating an answer adds a sibling
of that answer under the same user message; editing a message and sending it again adds a
sibling of that message. The path shown goes from the first message through
``Session.shown_message`` and on through the newest replies; a user message whose newest run has
not answered yet ends the path there (its answer is still coming).

Queued messages have no position yet (sessions.lane places them when their run starts): they
follow the path they were posted on and join their siblings once placed, except an edit, which
is a sibling at once (its parent is a finished turn).
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from django.core.exceptions import ValidationError

from sessions.models import Message, MessageRole, Run, Session
from sessions.selectors import LANE_STATUSES
from sessions.statements.post_reads import ConversationRow, conversation_rows
from sessions.statements.run_reads import placed_conversation


@dataclass(frozen=True)
class TreeNode:
    id: UUID
    parent_id: UUID | None
    position: int | None
    role: str
    created_at: datetime
    run_id: UUID | None = None
    # A user message: when its newest run was created. None for answers.
    latest_run_at: datetime | None = None
    # Its run (or, for a user message, one of its runs) is queued or active.
    is_pending: bool = False

    @property
    def is_queued(self) -> bool:
        return self.position is None


@dataclass(frozen=True)
class BranchInfo:
    """Where a message sits among its siblings (1-based), for the n/m navigation."""

    parent_id: UUID | None
    branch_index: int
    branch_count: int
    sibling_ids: list[UUID]

    @property
    def previous_id(self) -> UUID | None:
        return self.sibling_ids[self.branch_index - 2] if self.branch_index > 1 else None

    @property
    def next_id(self) -> UUID | None:
        return self.sibling_ids[self.branch_index] if self.branch_index < self.branch_count else None


class ConversationTree:
    """The messages of one conversation as a tree; pure, so the rules are tested without a database."""

    def __init__(self, nodes: Iterable[TreeNode]) -> None:
        self.nodes = {node.id: node for node in nodes}
        self._children: dict[UUID | None, list[TreeNode]] = {}
        for node in sorted(self.nodes.values(), key=_sibling_order):
            self._children.setdefault(node.parent_id, []).append(node)

    def children(self, parent_id: UUID | None) -> list[TreeNode]:
        """Placed children, oldest first, then a queued edit (its parent ended its turn)."""
        parent = self.nodes.get(parent_id) if parent_id is not None else None
        parent_is_settled = parent is None or not (parent.is_pending or parent.is_queued)
        return [
            node
            for node in self._children.get(parent_id, [])
            if not node.is_queued or (parent_is_settled and node.role == MessageRole.USER)
        ]

    def branch_info(self, message_id: UUID) -> BranchInfo:
        node = self.nodes[message_id]
        siblings = [sibling.id for sibling in self.children(node.parent_id)]
        if message_id not in siblings:  # queued behind a turn still being answered
            siblings = [message_id]
        return BranchInfo(
            parent_id=node.parent_id,
            branch_index=siblings.index(message_id) + 1,
            branch_count=len(siblings),
            sibling_ids=siblings,
        )

    def ancestors(self, message_id: UUID) -> list[UUID]:
        """From the first message to ``message_id``, inclusive."""
        chain: list[UUID] = []
        seen: set[UUID] = set()  # parent links that loop back end the walk
        current: UUID | None = message_id
        while current is not None and current in self.nodes and current not in seen:
            chain.append(current)
            seen.add(current)
            current = self.nodes[current].parent_id
        return chain[::-1]

    def path(self, through: UUID | None = None) -> list[UUID]:
        """The branch through ``through`` (None or unknown: the newest branch), then the queued
        messages posted at its end."""
        if through is not None and through not in self.nodes:
            through = None
        path = self.ancestors(through) if through is not None else []
        path.extend(self._newest_descent(through))
        return path + self._queued_after(path, starts_at_root=through is None)

    def _newest_descent(self, start: UUID | None) -> list[UUID]:
        descent: list[UUID] = []
        current = start
        while not self._waits_for_answer(current):
            placed = [child for child in self.children(current) if not child.is_queued]
            if not placed:
                break
            current = placed[-1].id
            descent.append(current)
        return descent

    def _waits_for_answer(self, message_id: UUID | None) -> bool:
        """A user message whose newest run is younger than its newest reply: that run's answer is
        the one to show, and it has no message yet."""
        node = self.nodes.get(message_id) if message_id is not None else None
        if node is None or node.latest_run_at is None or node.is_queued:
            return False
        replies = [child.created_at for child in self.children(node.id) if not child.is_queued]
        return not replies or node.latest_run_at > max(replies)

    def _queued_after(self, path: list[UUID], *, starts_at_root: bool) -> list[UUID]:
        """Queued messages posted at the end of ``path`` (or after a turn on it still being answered)."""
        placed = [message_id for message_id in path if not self.nodes[message_id].is_queued]
        ends: set[UUID | None] = {placed[-1]} if placed else ({None} if starts_at_root else set())
        ends |= {message_id for message_id in placed if self.nodes[message_id].is_pending}
        ends |= {message_id for message_id in path if self.nodes[message_id].is_queued}
        on_path = set(path)
        queued: list[UUID] = []
        for node in sorted(self.nodes.values(), key=lambda node: node.created_at):
            if node.is_queued and node.id not in on_path and node.parent_id in ends:
                queued.append(node.id)
                ends.add(node.id)
        return queued


def _sibling_order(node: TreeNode) -> tuple[bool, int, datetime]:
    return (node.is_queued, node.position or 0, node.created_at)


def conversation_tree(session_id: UUID) -> ConversationTree:
    """The session's conversation as a tree: its messages and its runs' start times, read once."""
    rows, newest_run_at = conversation_rows(session_id, pending_statuses=LANE_STATUSES)
    return ConversationTree(
        tree_node(
            row,
            latest_run_at=newest_run_at.get(row.id) if row.role == MessageRole.USER else None,
            is_pending=row.is_pending,
        )
        for row in rows
    )


def tree_node(
    message: Message | ConversationRow, *, latest_run_at: datetime | None, is_pending: bool
) -> TreeNode:
    return TreeNode(
        id=message.id,
        parent_id=message.parent_id,
        position=message.position,
        role=message.role,
        created_at=message.created_at,
        run_id=message.run_id,
        latest_run_at=latest_run_at,
        is_pending=is_pending,
    )


def shown_path(session: Session, *, through: UUID | None = None) -> tuple[ConversationTree, list[UUID]]:
    """The tree and the path people see: through ``through``, else the session's shown message."""
    tree = conversation_tree(session.pk)
    return tree, tree.path(through if through is not None else session.shown_message_id)


def run_context_path(run: Run) -> list[tuple[UUID, int]]:
    """(id, position) of the placed messages from the conversation's start to the run's latest
    message: the branch the run answers on, never another one's messages."""
    rows = placed_conversation(run.session_id)
    parents = {row[0]: row[1] for row in rows}
    positions: dict[UUID, int] = {row[0]: row[2] for row in rows if row[2] is not None}
    own = [(row[2], row[0]) for row in rows if row[3] == run.pk and row[0] != run.user_message_id]
    tip = max(own)[1] if own else run.user_message_id
    chain: list[tuple[UUID, int]] = []
    while tip is not None and tip in positions:
        chain.append((tip, positions[tip]))
        tip = parents[tip]
    return chain[::-1]


# The parent a post asks for: a message id, None for a first message, or the shown branch's end.
SHOWN_BRANCH = "shown"
RequestedParent = UUID | None | str


@dataclass(frozen=True)
class PostParent:
    """Where a posted message goes, decided on the conversation's tree as the post read it."""

    parent_id: UUID | None
    # An edit starts a branch: the session shows it from then on.
    is_branch_start: bool
    tree: ConversationTree

    def branch_of(self, message: Message, run: Run) -> BranchInfo:
        """The posted message's place among its siblings, without reading the tree again."""
        posted = tree_node(message, latest_run_at=run.created_at, is_pending=True)
        return ConversationTree([*self.tree.nodes.values(), posted]).branch_info(message.pk)


def parent_for_post(session: Session, *, requested: RequestedParent) -> PostParent:
    """The parent of a message posted to ``session``, and whether it starts a branch (an edit).

    Without a chosen parent the message continues the branch people see. A chosen parent must be
    a message of this conversation that ends its turn: one no answer follows, and that is not
    waiting for an answer itself.
    """
    tree, path = shown_path(session)
    if requested == SHOWN_BRANCH:
        return PostParent(path[-1] if path else None, is_branch_start=False, tree=tree)
    if requested is None:
        return PostParent(None, is_branch_start=True, tree=tree)
    node = tree.nodes.get(requested) if isinstance(requested, UUID) else None
    if node is None:
        raise ValidationError({"parent_id": ["No such message in this conversation."]})
    if node.is_queued or node.is_pending:
        raise ValidationError({"parent_id": ["This message's turn is still being answered."]})
    if any(child.role != MessageRole.USER for child in tree.children(node.id)):
        raise ValidationError({"parent_id": ["An answer follows this message: post after the answer."]})
    return PostParent(node.id, is_branch_start=True, tree=tree)


def messages_in_order(message_ids: list[UUID]) -> list[Message]:
    """The messages of ``message_ids`` (a path, or a page of one), in that order."""
    by_id = Message.objects.filter(pk__in=message_ids).in_bulk()
    return [by_id[message_id] for message_id in message_ids if message_id in by_id]


def branch_infos(tree: ConversationTree, message_ids: Iterable[UUID]) -> dict[UUID, BranchInfo]:
    return {message_id: tree.branch_info(message_id) for message_id in message_ids}


def message_branch_info(message: Message) -> BranchInfo:
    """One message's place among its siblings (reads the conversation's tree)."""
    tree = conversation_tree(message.session_id)
    if message.pk not in tree.nodes:  # an executor's message: outside the conversation
        return BranchInfo(
            parent_id=message.parent_id, branch_index=1, branch_count=1, sibling_ids=[message.pk]
        )
    return tree.branch_info(message.pk)

"""The chat's branches (sessions.branches): which runs the branch shown holds, and each turn's
place among its siblings for the n/m navigation."""

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from uuid import UUID

from sessions.branches import BranchInfo, ConversationTree, branch_infos
from sessions.models import Message, MessageRole, Run

if TYPE_CHECKING:
    from web.transcript import Turn


def runs_on_path(tree: ConversationTree, path: list[UUID], runs: Iterable[Run]) -> set[Any]:
    """The runs whose answers the path shows, and those that ended with no answer at all after a
    user message on it (a failure shows where it happened); other branches' runs stay out."""
    answered = {node.run_id for node in tree.nodes.values() if node.role != MessageRole.USER}
    shown = {
        tree.nodes[message_id].run_id
        for message_id in path
        if tree.nodes[message_id].role != MessageRole.USER
    }
    ends_unanswered = {
        message_id
        for index, message_id in enumerate(path)
        if tree.nodes[message_id].role == MessageRole.USER
        and (index + 1 == len(path) or tree.nodes[path[index + 1]].role == MessageRole.USER)
    }
    shown |= {
        run.pk
        for run in runs
        if run.parent_run_id is None and run.user_message_id in ends_unanswered and run.pk not in answered
    }
    return shown


def attach_branches(
    turns: list["Turn"], tree: ConversationTree, messages: list[Message], lane: Iterable[Run]
) -> None:
    """Each user turn's siblings, and each answer's: the answer's first message's siblings, then
    an answer of the same question still coming (a regenerate that has no message yet)."""
    infos = branch_infos(tree, (message.pk for message in messages))
    coming = _answers_coming(tree, lane)
    first_of_run: dict[Any, UUID] = {}
    for message in messages:
        if message.role != MessageRole.USER and message.run_id is not None:
            first_of_run.setdefault(message.run_id, message.pk)
    for turn in turns:
        if turn.role == "user" and turn.message is not None:
            turn.branch = infos.get(turn.message.pk)
        elif turn.run is not None and turn.run.pk in first_of_run:
            info = infos[first_of_run[turn.run.pk]]
            if info.parent_id is not None and info.parent_id in coming:
                info = _with_answer_coming(info, info.parent_id)
            turn.branch = info


def _answers_coming(tree: ConversationTree, lane: Iterable[Run]) -> set[UUID]:
    """User messages answered again by a run in the lane that has stored no message yet."""
    return {
        run.user_message_id
        for run in lane
        if run.parent_run_id is None
        and run.user_message_id in tree.nodes
        and all(child.run_id != run.pk for child in tree.children(run.user_message_id))
    }


def _with_answer_coming(info: BranchInfo, answered: UUID) -> BranchInfo:
    """``info`` with the answer still coming as the last sibling. It has no message yet, so its
    question stands in: the branch shown through the question ends at its newest answer."""
    return BranchInfo(
        parent_id=answered,
        branch_index=info.branch_index,
        branch_count=info.branch_count + 1,
        sibling_ids=[*info.sibling_ids, answered],
    )


def pending_answer_branch(tree: ConversationTree, user_message_id: UUID, run: Run) -> BranchInfo | None:
    """The place of an answer still coming after earlier answers of the same message (a
    regenerate): last among them. Its own id stands in for its message, which it may not have
    yet, or may have stored while it is still running (it counts once either way)."""
    answers = [
        child.id
        for child in tree.children(user_message_id)
        if child.role != MessageRole.USER and child.run_id != run.pk
    ]
    if not answers:
        return None
    count = len(answers) + 1
    return BranchInfo(
        parent_id=user_message_id, branch_index=count, branch_count=count, sibling_ids=[*answers, run.pk]
    )


def off_branch_runs(tree: ConversationTree, path: list[UUID], lane: Iterable[Run]) -> list[Run]:
    """Runs in the lane answering on another branch than the one shown: the page follows their
    status but does not show their answer (switching to their branch does)."""
    following = {
        message_id: path[index + 1] if index + 1 < len(path) else None
        for index, message_id in enumerate(path)
    }
    hidden = []
    for run in lane:
        if run.user_message_id not in following:
            hidden.append(run)
            continue
        after = following[run.user_message_id]
        node = tree.nodes[after] if after is not None else None
        if node is not None and node.role != MessageRole.USER and node.run_id != run.pk:
            hidden.append(run)
    return hidden

"""A session's conversation as the chat page shows it: turns of people and of runs.

Runs that have finished are rendered from their stored messages. Runs still in the lane
(queued or active) are left to the page's script, which replays their events from the
store over the websocket (``after_seq``) and then follows them live, so text that is
still streaming is never shown twice or lost between the page and the socket.
"""

from dataclasses import dataclass, field
from typing import Any, Literal
from uuid import UUID

from django.db.models import Min
from django.http import Http404

from files.artifacts import artifacts_by_run
from files.citations import citations_by_run, cited_in, citing_run_ids
from sessions.branches import BranchInfo, ConversationTree, messages_in_order, shown_path
from sessions.lane import lane_status
from sessions.models import Message, MessageRole, Run, RunEvent, Session, ToolApproval, UserQuestion
from sessions.selectors import (
    message_list_for_session,
    session_get_for_actor,
)
from sessions.state import TERMINAL_RUN_STATUSES
from sessions.tool_outcomes import ToolCallOutcome, tool_call_outcome
from tenants.actors import Actor
from tenants.models import Role
from web.chat_branches import attach_branches, off_branch_runs, pending_answer_branch, runs_on_path
from web.chat_files import ArtifactCard, Attachment, artifact_card, message_attachments
from web.waterfall import child_run_kind

RETRYABLE_STATUSES = ("failed", "cancelled", "timeout")


@dataclass
class ChildRun:
    """A planner executor or a sub-agent, shown as its own block in its parent's answer."""

    run: Run
    parts: list["Part"] = field(default_factory=list)
    artifacts: list[ArtifactCard] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return child_run_kind(self.run)


@dataclass
class ToolCard:
    tool_call_id: str
    name: str
    arguments: Any
    result: str | None = None
    is_error: bool = False
    approval: ToolApproval | None = None
    # ask_user: the question the call asked, with its answer.
    question: UserQuestion | None = None
    # spawn_subagent: the sub-agent the call started.
    child: ChildRun | None = None

    @property
    def state(self) -> ToolCallOutcome:
        """pending, done, error or denied: what the card's badge says (as the run page's)."""
        return tool_call_outcome(
            has_result=self.result is not None,
            is_error=self.is_error,
            is_denied=self.approval is not None and self.approval.decision == "deny",
        )


@dataclass
class Part:
    kind: Literal["text", "reasoning", "tool"]
    text: str = ""
    tool: ToolCard | None = None
    # Text of an answer the run stopped while it streamed.
    is_stopped: bool = False


@dataclass
class Turn:
    role: Literal["user", "assistant"]
    # The user message the turn belongs to: the page inserts a run's live turn after it.
    message_id: str
    message: Message | None = None
    run: Run | None = None
    parts: list[Part] = field(default_factory=list)
    # Executors of a plan (shown before the answer they lead to).
    children: list[ChildRun] = field(default_factory=list)
    # The passages the answer cites ([1], [2]…), as ``files.citations.citation_data`` gives them.
    citations: list[dict[str, Any]] = field(default_factory=list)
    # The files the run's tools made.
    artifacts: list[ArtifactCard] = field(default_factory=list)
    # Its place among its siblings (web.chat_branches): regenerated answers, edited messages.
    branch: BranchInfo | None = None
    # An answer still in the lane, rendered empty for the page's script to fill (a regenerate).
    is_live: bool = False
    # Its run was retried: the retry's turn offers Retry, not this one.
    has_retry: bool = False

    @property
    def attachment_ids(self) -> str:
        """The files the message carries, for an edit to send them again."""
        if self.message is None:
            return ""
        return ",".join(
            str(block["file_id"]) for block in self.message.content if block.get("type") == "attachment"
        )

    @property
    def attachments(self) -> list[Attachment]:
        return message_attachments(self.message) if self.role == "user" else []

    @property
    def text(self) -> str:
        return "".join(part.text for part in self.parts if part.kind == "text")

    @property
    def is_retryable(self) -> bool:
        return self.run is not None and self.run.status in RETRYABLE_STATUSES and not self.has_retry


@dataclass(frozen=True)
class ChatTranscript:
    turns: list[Turn]
    lane_runs: list[Run]
    after_seq: int
    # Finished runs with events after ``after_seq``: the page already shows them.
    settled_run_ids: list[str]
    # Lane runs answering on another branch than the one shown (web.chat_branches).
    off_branch_run_ids: list[str]
    status: str
    can_post: bool


def _message_order(message: Message) -> tuple[bool, int, Any]:
    # Queued messages have no position yet and come last, in the order they were sent.
    return (message.position is None, message.position or 0, message.created_at)


def _user_turn(message: Message, runs: dict[Any, Run]) -> Turn:
    return Turn(role="user", message_id=str(message.pk), message=message, run=runs.get(message.run_id))


def _assistant_parts(
    message: Message, cards: dict[str, ToolCard], approvals: dict[str, ToolApproval]
) -> list[Part]:
    parts: list[Part] = []
    for block in message.content:
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            parts.append(Part(kind="text", text=block["text"], is_stopped=message.is_stopped))
        elif kind == "reasoning" and block.get("text"):
            parts.append(Part(kind="reasoning", text=block["text"]))
        elif kind == "tool_call":
            card = ToolCard(
                tool_call_id=str(block.get("id", "")),
                name=str(block.get("name", "")),
                arguments=block.get("arguments", {}),
                approval=approvals.get(str(block.get("id", ""))),
            )
            cards[card.tool_call_id] = card
            parts.append(Part(kind="tool", tool=card))
    return parts


def _attach_results(message: Message, cards: dict[str, ToolCard]) -> None:
    for block in message.content:
        card = cards.get(str(block.get("tool_call_id", "")))
        if block.get("type") == "tool_result" and card is not None:
            card.result = str(block.get("content", ""))
            card.is_error = bool(block.get("is_error"))


def build_turns(
    messages: list[Message], runs: dict[Any, Run], approvals: dict[str, ToolApproval]
) -> list[Turn]:
    """Turns from stored messages; messages of runs not in ``runs`` (still in the lane) are skipped."""
    turns: list[Turn] = []
    cards: dict[str, ToolCard] = {}
    for message in sorted(messages, key=_message_order):
        if message.role == MessageRole.USER:
            turns.append(_user_turn(message, runs))
            continue
        run = runs.get(message.run_id)
        if run is None:
            continue
        if message.role == MessageRole.TOOL:
            _attach_results(message, cards)
            continue
        if not turns or turns[-1].run is not run or turns[-1].role != "assistant":
            turns.append(Turn(role="assistant", message_id=str(run.user_message_id or ""), run=run))
        turns[-1].parts.extend(_assistant_parts(message, cards, approvals))
    _add_turns_of_runs_without_messages(turns, runs)
    return turns


def _add_turns_of_runs_without_messages(turns: list[Turn], runs: dict[Any, Run]) -> None:
    """A run that ended before answering (cancelled in the queue, failed) still shows how it ended."""
    shown = {turn.run.pk for turn in turns if turn.role == "assistant" and turn.run is not None}
    for run in sorted(runs.values(), key=lambda run: run.created_at):
        if run.pk in shown:
            continue
        anchor = str(run.user_message_id or "")
        positions = [index for index, turn in enumerate(turns) if turn.message_id == anchor]
        at = positions[-1] + 1 if positions else len(turns)
        turns.insert(at, Turn(role="assistant", message_id=anchor, run=run))


def _child_parts(children: list[Run], approvals: dict[str, ToolApproval]) -> dict[Any, list[Part]]:
    """Each child run's turns (its prompt left out: the block's title says what it does)."""
    parts: dict[Any, list[Part]] = {child.pk: [] for child in children}
    cards: dict[str, ToolCard] = {}
    messages = Message.objects.filter(run__in=children, position__isnull=False).exclude(role=MessageRole.USER)
    for message in messages.order_by("position"):
        if message.role == MessageRole.TOOL:
            _attach_results(message, cards)
        else:
            parts[message.run_id].extend(_assistant_parts(message, cards, approvals))
    return parts


def attach_children(turns: list[Turn], children: list[Run], approvals: dict[str, ToolApproval]) -> None:
    """Put each finished parent's child runs in its answer: a sub-agent under its tool call."""
    parts = _child_parts(children, approvals)
    answers: dict[Any, Turn] = {}
    for turn in turns:
        if turn.role == "assistant" and turn.run is not None:
            answers.setdefault(turn.run.pk, turn)
    cards = {
        part.tool.tool_call_id: part.tool
        for turn in answers.values()
        for part in turn.parts
        if part.tool is not None
    }
    for child in children:
        block = ChildRun(run=child, parts=parts[child.pk])
        card = cards.get(child.parent_tool_call_id) if child.parent_tool_call_id else None
        if card is not None:
            card.child = block
        elif child.parent_run_id in answers:
            answers[child.parent_run_id].children.append(block)


def attach_citations(turns: list[Turn], messages: list[Message]) -> None:
    """Give each finished answer the passages its text cites (one query for the whole page)."""
    by_run = citations_by_run(citing_run_ids(messages))
    for turn in turns:
        if turn.role == "assistant" and turn.run is not None and turn.run.pk in by_run:
            turn.citations = cited_in(turn.text, by_run[turn.run.pk])


def attach_questions(turns: list[Turn], runs: list[Run]) -> None:
    """Give each finished answer's ask_user cards their question and answer (one query)."""
    questions = {
        question.tool_call_id: question
        for question in UserQuestion.objects.filter(run__in=runs).select_related("answered_by")
    }
    if not questions:
        return
    for turn in turns:
        for part in turn.parts:
            if part.tool is not None and part.tool.tool_call_id in questions:
                part.tool.question = questions[part.tool.tool_call_id]


def attach_artifacts(turns: list[Turn]) -> None:
    """Give each finished answer, and each of its child blocks, the files its run made (one query)."""
    holders: dict[Any, Turn | ChildRun] = {}
    for turn in turns:
        if turn.role != "assistant" or turn.run is None:
            continue
        holders.setdefault(turn.run.pk, turn)
        for child in turn.children:
            holders[child.run.pk] = child
        for part in turn.parts:
            if part.tool is not None and part.tool.child is not None:
                holders[part.tool.child.run.pk] = part.tool.child
    for run_id, artifacts in artifacts_by_run(holders).items():
        holders[run_id].artifacts = [artifact_card(stored) for stored in artifacts]


def chat_transcript(*, actor: Actor, session: Session) -> ChatTranscript:
    """The session as the chat page renders it, and where its live replay starts.

    Child runs (executors, sub-agents) follow their parent: rendered inside its finished answer,
    or replayed with it while it is still in the lane.
    """
    runs = list(Run.objects.filter(session=session).order_by("created_at"))
    top_level = {run.pk: run for run in runs if run.parent_run_id is None}
    settled = {run.pk: run for run in top_level.values() if run.status in TERMINAL_RUN_STATUSES}
    lane = [run for run in top_level.values() if run.pk not in settled]
    settled_children = [run for run in runs if run.parent_run_id in settled]
    after_seq = _replay_start(session, lane)
    replayed_settled = (
        RunEvent.objects.filter(
            session=session,
            seq__gt=after_seq,
            run_id__in=[*settled, *(child.pk for child in settled_children)],
        )
        .values_list("run_id", flat=True)
        .distinct()
    )
    approvals = _approvals_by_call([*settled.values(), *settled_children])
    tree, path = shown_path(session)
    messages = messages_in_order(path)
    on_path = runs_on_path(tree, path, settled.values())
    turns = build_turns(messages, {pk: run for pk, run in settled.items() if pk in on_path}, approvals)
    attach_branches(turns, tree, messages, lane)
    attach_children(turns, settled_children, approvals)
    attach_citations(turns, messages)
    attach_questions(turns, list(settled.values()))
    attach_artifacts(turns)
    lane_by_id = {run.pk: run for run in lane}
    for turn in turns:
        if turn.role == "user" and turn.message is not None and turn.message.run_id in lane_by_id:
            turn.run = lane_by_id[turn.message.run_id]
    off_branch = off_branch_runs(tree, path, lane)
    _add_pending_answers(turns, tree, [run for run in lane if run not in off_branch])
    retried = {run.retry_of_id for run in runs if run.retry_of_id}
    for turn in turns:
        turn.has_retry = turn.run is not None and turn.run.pk in retried
    return ChatTranscript(
        turns=turns,
        lane_runs=lane,
        after_seq=max(after_seq, 0),
        settled_run_ids=sorted({str(run_id) for run_id in replayed_settled}),
        off_branch_run_ids=[str(run.pk) for run in off_branch],
        status=lane_status(lane),
        can_post=actor.can(Role.MEMBER) and (session.created_by_id == actor.user_id or actor.can(Role.ADMIN)),
    )


def _replay_start(session: Session, lane: list[Run]) -> int:
    """The seq the page's live replay starts after: before the first event of a run still in the
    lane, else the session's latest (the page renders everything up to it)."""
    last_seq: int = Session.objects.filter(pk=session.pk).values_list("last_event_seq", flat=True).get()
    if not lane:
        return last_seq
    first = RunEvent.objects.filter(run__in=lane).aggregate(first=Min("seq"))["first"]
    return min(last_seq, first - 1) if first is not None else last_seq


def _approvals_by_call(runs: list[Run]) -> dict[str, ToolApproval]:
    approvals = ToolApproval.objects.filter(run__in=runs).select_related("decided_by")
    return {approval.tool_call_id: approval for approval in approvals}


def _add_pending_answers(turns: list[Turn], tree: ConversationTree, lane: list[Run]) -> None:
    """A regenerated answer still in the lane gets its turn now, with its place among the earlier
    answers, right after its message (the script fills it as the run's events arrive)."""
    for run in lane:
        at = next(
            (
                i
                for i, turn in enumerate(turns)
                if turn.role == "user" and turn.message_id == str(run.user_message_id)
            ),
            None,
        )
        if at is None or run.user_message_id is None:
            continue
        branch = pending_answer_branch(tree, run.user_message_id, run)
        if branch is not None:
            turns.insert(
                at + 1,
                Turn(role="assistant", message_id=turns[at].message_id, run=run, branch=branch, is_live=True),
            )


def user_turn_for_actor(*, actor: Actor, session_id: str, message_id: str) -> Turn:
    """One user message of a session as a turn, for the page to add one posted elsewhere."""
    session = session_get_for_actor(actor=actor, session_id=session_id)
    message = (
        message_list_for_session(session=session).filter(role=MessageRole.USER, pk=_uuid(message_id)).first()
    )
    if message is None:
        raise Http404("message not found")
    run = Run.objects.filter(pk=message.run_id).first() if message.run_id else None
    return Turn(role="user", message_id=str(message.pk), message=message, run=run)


def _uuid(value: str) -> UUID:
    try:
        return UUID(value)
    except ValueError as error:
        raise Http404("not found") from error

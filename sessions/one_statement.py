"""PostgreSQL: the hot writes of a message and its run, with their events, one statement each.

Posting stores a message, a queued run and its event; a run is a handful of writes (steps
start and end, messages join the transcript, the run ends), each with the events that
describe it. Through the ORM each was a transaction of four or five statements; here each is
one statement whose CTEs change the rows, then number and insert the events, so the events
commit with exactly the rows they describe (and not at all when a conditional update loses).
SQLite keeps the ORM versions in ``sessions.recorder``, ``sessions.services`` and
``sessions.state``; the suite runs both and pins the results to each other.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection

from core.prepared import RoundTrips, rows_of, write_in_one_transaction
from core.rows import insert_values
from sessions.events import NUMBERED_EVENTS_INSERT, PendingEvent, announce_on_commit, numbered_insert_params
from sessions.models import Message, Run, Session, Step, StepStatus

_STEPS, _RUNS, _SESSIONS = Step._meta.db_table, Run._meta.db_table, Session._meta.db_table
_OPEN_STEP_STATUSES = (StepStatus.PENDING, StepStatus.RUNNING)
_TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")

# A step running → completed at its version, and the run's counters; "numbered" follows.
_STEP_DONE_AND_RUN_COUNTED = (
    f"WITH done AS (UPDATE {_STEPS} SET status = %s, version = version + 1, output = %s,"  # noqa: S608
    " finished_at = %s, input_tokens = COALESCE(%s, input_tokens),"
    " output_tokens = COALESCE(%s, output_tokens), cache_read_tokens = COALESCE(%s, cache_read_tokens),"
    " cache_write_tokens = COALESCE(%s, cache_write_tokens)"
    " WHERE id = %s AND status = %s AND version = %s RETURNING id),"
    f" counted AS (UPDATE {_RUNS} SET input_tokens = input_tokens + %s, output_tokens = output_tokens + %s,"
    " cache_read_tokens = cache_read_tokens + %s, cache_write_tokens = cache_write_tokens + %s,"
    " model_calls = model_calls + %s WHERE id = %s AND EXISTS (SELECT 1 FROM done) RETURNING id),"
)
# After _STEP_DONE_AND_RUN_COUNTED: the session's next message position and event numbers.
_NUMBERED_WITH_MESSAGE_POSITION = (
    f" numbered AS (UPDATE {_SESSIONS} SET last_message_position = last_message_position + 1,"  # noqa: S608
    " last_event_seq = last_event_seq + %s WHERE id = %s AND EXISTS (SELECT 1 FROM done)"
    " RETURNING last_message_position, last_event_seq),"
)
_COMPLETE_STEP = (
    _STEP_DONE_AND_RUN_COUNTED + f" numbered AS (UPDATE {_SESSIONS} SET last_event_seq = last_event_seq + %s"  # noqa: S608
    " WHERE id = %s AND EXISTS (SELECT 1 FROM done) RETURNING last_event_seq)" + NUMBERED_EVENTS_INSERT
)

# A condition on a step being completed at a version: what follows a completion in its transaction.
_AFTER_COMPLETING = f" AND EXISTS (SELECT 1 FROM {_STEPS} WHERE id = %s AND status = %s AND version = %s)"  # noqa: S608


def store_message_and_run(
    message: Message, run: Run, *, title: str, events: list[PendingEvent], round_trips: RoundTrips
) -> list[int]:
    """A posted message, its queued run and their events; the session titled if it has no title.

    One statement, sent in ``round_trips``'s transaction, which the caller commits: until then
    the session's row stays locked. Returns the events' numbers: the caller announces them
    once committed, after enqueueing the run, so the worker's part starts first."""
    message_columns, message_values = insert_values(message)
    run_columns, run_values = insert_values(run)
    statement = (
        f"WITH added_message AS (INSERT INTO {Message._meta.db_table} ({', '.join(message_columns)})"  # noqa: S608
        f" VALUES ({', '.join(['%s'] * len(message_columns))}) RETURNING id),"
        f" added_run AS (INSERT INTO {_RUNS} ({', '.join(run_columns)})"
        f" VALUES ({', '.join(['%s'] * len(run_columns))}) RETURNING id),"
        f" numbered AS (UPDATE {_SESSIONS} SET last_event_seq = last_event_seq + %s, updated_at = %s,"
        " title = CASE WHEN title = '' THEN %s ELSE title END WHERE id = %s RETURNING last_event_seq)"
        + NUMBERED_EVENTS_INSERT
    )
    session_id = run.session_id
    params = [*message_values, *run_values, len(events), run.created_at, title, session_id]
    params += numbered_insert_params(session_id, events)
    [rows] = round_trips.run([(statement, params)])
    sequence_numbers = [seq for (seq,) in rows]
    if not sequence_numbers:
        raise Session.DoesNotExist(f"session {session_id} does not exist")
    for instance in (message, run):
        instance._state.adding, instance._state.db = False, "default"
    return sequence_numbers


def complete_step(
    step: Step,
    *,
    output: dict[str, Any],
    finished_at: datetime,
    tokens: dict[str, int],
    model_calls: int,
    events: list[PendingEvent],
) -> bool:
    """running → completed at the step's version, the run's counters, the events; False if stale."""
    statement, params = _complete_step_statement(
        step, output=output, finished_at=finished_at, tokens=tokens, model_calls=model_calls, events=events
    )
    return _execute_with_events(statement, params, step.run.session_id, events)


def _complete_step_statement(
    step: Step,
    *,
    output: dict[str, Any],
    finished_at: datetime,
    tokens: dict[str, int],
    model_calls: int,
    events: list[PendingEvent],
) -> tuple[str, list[Any]]:
    session_id = step.run.session_id
    params = [
        *_completion_params(
            step, output=output, finished_at=finished_at, tokens=tokens, model_calls=model_calls
        ),
        *(len(events), session_id, *numbered_insert_params(session_id, events)),
    ]
    return _COMPLETE_STEP, params


@dataclass(frozen=True)
class ToolCompletion:
    """A tool call's end, held back to be stored with the next write (the results message)."""

    step: Step
    output: dict[str, Any]
    finished_at: datetime
    events: list[PendingEvent]


def _tool_completion_statement(completion: ToolCompletion) -> tuple[str, list[Any]]:
    """A tool call uses no tokens and makes no model call: only the step and its events change."""
    return _complete_step_statement(
        completion.step,
        output=completion.output,
        finished_at=completion.finished_at,
        tokens={},
        model_calls=0,
        events=completion.events,
    )


def complete_tool_step(completion: ToolCompletion) -> bool:
    """The tool call's end and its events on their own; False (nothing written) if stale."""
    statement, params = _tool_completion_statement(completion)
    return _execute_with_events(statement, params, completion.step.run.session_id, completion.events)


def complete_tool_step_append_message_and_insert_steps(
    completion: ToolCompletion, message: Message, steps: list[Step], *, events: list[PendingEvent]
) -> tuple[bool, bool]:
    """The last tool call's end, the results message and the next steps with their events: one
    round trip and one commit.

    Returns (tool step completed, message and steps stored). The message and the steps are
    conditional on the tool step being completed at the version the first statement gave it.
    """
    step = completion.step
    completed_rows, appended_rows, inserted_rows = write_in_one_transaction(
        [
            _tool_completion_statement(completion),
            _append_message_statement(message, events=[], after_completing=step),
            _insert_steps_statement(steps, events=events, after_completing=step),
        ]
    )
    completed, stored = bool(completed_rows), bool(appended_rows) and bool(inserted_rows)
    _announce_together(step.run.session_id, [(completed_rows, completion.events), (inserted_rows, events)])
    if stored:
        _mark_saved(steps)
    return completed, stored


@dataclass(frozen=True)
class AnswerCompletion:
    """A model call's end with the answer it gave (the recorder holds them back to store together)."""

    step: Step
    output: dict[str, Any]
    finished_at: datetime
    tokens: dict[str, int]
    message: Message
    events: list[PendingEvent]


def store_answer(answer: AnswerCompletion) -> bool:
    """The model call's end (``complete_step``) and its answer joining the transcript
    (``append_message``) in one statement. False (nothing written, not even the message) if the
    step is stale."""
    return _execute_with_events(*_answer_statement(answer), answer.step.run.session_id, answer.events)


def _answer_statement(answer: AnswerCompletion) -> tuple[str, list[Any]]:
    columns, values, select_values = _message_at_next_position(answer.message)
    message_insert = (
        f" added AS (INSERT INTO {Message._meta.db_table} ({', '.join(columns)})"  # noqa: S608
        f" SELECT {', '.join(select_values)} FROM numbered RETURNING id)"
    )
    statement = (
        _STEP_DONE_AND_RUN_COUNTED + _NUMBERED_WITH_MESSAGE_POSITION + message_insert + NUMBERED_EVENTS_INSERT
    )
    session_id = answer.step.run.session_id
    completion = _completion_params(
        answer.step, output=answer.output, finished_at=answer.finished_at, tokens=answer.tokens, model_calls=1
    )
    params = [
        *completion,
        *(len(answer.events), session_id, *values, *numbered_insert_params(session_id, answer.events)),
    ]
    return statement, params


def store_answer_and_finish_run(
    answer: AnswerCompletion,
    run: Run,
    *,
    to_status: str,
    stop_reason: str,
    error: str,
    finished_at: datetime,
    events: list[PendingEvent],
) -> tuple[bool, bool]:
    """The run's last answer and the run's end in one round trip and one commit.

    Returns (answer stored, run finished). The end is written only if the answer was: it is
    conditional on the answer's step being completed at the version the first statement gave
    it. The answer can be stored while the end is not (the run moved on, as ``finish_run``).
    """
    finish_statement = _finish_run_statement(
        run,
        to_status=to_status,
        stop_reason=stop_reason,
        error=error,
        finished_at=finished_at,
        events=events,
        after_completing=answer.step,
    )
    answer_rows, finish_rows = write_in_one_transaction([_answer_statement(answer), finish_statement])
    _announce_together(run.session_id, [(answer_rows, answer.events), (finish_rows, events)])
    return bool(answer_rows), bool(finish_rows)


def _completion_params(
    step: Step, *, output: dict[str, Any], finished_at: datetime, tokens: dict[str, int], model_calls: int
) -> list[Any]:
    """The parameters of ``_STEP_DONE_AND_RUN_COUNTED``."""
    output_value = Step._meta.get_field("output").get_db_prep_save(output, connection)
    step_tokens = [tokens.get(name) for name in _TOKEN_FIELDS]
    run_tokens = [tokens.get(name, 0) for name in _TOKEN_FIELDS]
    return [
        *(StepStatus.COMPLETED, output_value, finished_at, *step_tokens, step.pk, step.status, step.version),
        *(*run_tokens, model_calls, step.run_id),
    ]


def _message_at_next_position(message: Message) -> tuple[list[str], list[Any], list[str]]:
    """The message's columns, its values without the position, and the SELECT list that takes the
    position from a ``numbered`` CTE returning ``last_message_position``."""
    columns, values = insert_values(message)
    position_index = columns.index('"position"')
    select_values = ["%s"] * len(columns)
    select_values[position_index] = "numbered.last_message_position"
    del values[position_index]
    return columns, values, select_values


def append_message(message: Message, *, events: list[PendingEvent]) -> None:
    """The message at the session's next position, with the events (if any), in one statement."""
    statement, params = _append_message_statement(message, events=events)
    rows = rows_of(statement, params)
    if not rows or (events and not _announce(rows, message.session_id, events)):
        raise Session.DoesNotExist(f"session {message.session_id} does not exist")


def _append_message_statement(
    message: Message, *, events: list[PendingEvent], after_completing: Step | None = None
) -> tuple[str, list[Any]]:
    """Returns the message's id without events, else the events' numbers.

    ``after_completing``: only if this step is completed at the version its completion gives it.
    """
    columns, values, select_values = _message_at_next_position(message)
    numbered = (
        f"WITH numbered AS (UPDATE {_SESSIONS} SET last_message_position = last_message_position + 1,"  # noqa: S608
        " last_event_seq = last_event_seq + %s WHERE id = %s"
        f"{_AFTER_COMPLETING if after_completing is not None else ''}"
        " RETURNING last_message_position, last_event_seq)"
    )
    insert = f"INSERT INTO {Message._meta.db_table} ({', '.join(columns)}) SELECT {', '.join(select_values)}"
    session_id = message.session_id
    params = [len(events), session_id]
    if after_completing is not None:
        params += [after_completing.pk, StepStatus.COMPLETED, after_completing.version + 1]
    params += values
    if not events:
        return f"{numbered} {insert} FROM numbered RETURNING id", params
    statement = f"{numbered}, added AS ({insert} FROM numbered RETURNING id)" + NUMBERED_EVENTS_INSERT
    return statement, params + numbered_insert_params(session_id, events)


def insert_steps(steps: list[Step], *, events: list[PendingEvent]) -> None:
    """New steps and the events that announce them, in one statement."""
    session_id = steps[0].run.session_id
    if not _execute_with_events(*_insert_steps_statement(steps, events=events), session_id, events):
        raise Session.DoesNotExist(f"session {session_id} does not exist")
    _mark_saved(steps)


def append_message_and_insert_steps(
    message: Message, steps: list[Step], *, events: list[PendingEvent]
) -> None:
    """A transcript message, then new steps and the events that announce them: one round trip
    and one commit (``write_in_one_transaction``). Neither is conditional."""
    appended, inserted = write_in_one_transaction(
        [_append_message_statement(message, events=[]), _insert_steps_statement(steps, events=events)]
    )
    if not appended or not _announce(inserted, message.session_id, events):
        raise Session.DoesNotExist(f"session {message.session_id} does not exist")
    _mark_saved(steps)


def store_answer_and_insert_steps(
    answer: AnswerCompletion,
    steps: list[Step],
    *,
    events: list[PendingEvent],
    message: Message | None = None,
) -> tuple[bool, bool]:
    """A model call's answer asking for tools, then the steps with their events (the tool steps
    it starts; or, held until the calls ended, those steps, ended, and the next model call's,
    after ``message``, the results): one round trip and one commit.

    Returns (answer stored, the rest stored). The rest is written only if the answer was: it is
    conditional on the answer's step being completed at the version the first statement gave it.
    """
    statements = [_answer_statement(answer)]
    if message is not None:
        statements.append(_append_message_statement(message, events=[], after_completing=answer.step))
    statements.append(_insert_steps_statement(steps, events=events, after_completing=answer.step))
    answer_rows, *rest_rows = write_in_one_transaction(statements)
    step_rows = rest_rows[-1]
    _announce_together(answer.step.run.session_id, [(answer_rows, answer.events), (step_rows, events)])
    if step_rows:
        _mark_saved(steps)
    return bool(answer_rows), all(bool(rows) for rows in rest_rows)


def _insert_steps_statement(
    steps: list[Step], *, events: list[PendingEvent], after_completing: Step | None = None
) -> tuple[str, list[Any]]:
    """``after_completing``: only if this step is completed at the version its completion gives it."""
    rows = [insert_values(step) for step in steps]
    columns = rows[0][0]
    session_id = steps[0].run.session_id
    params = [value for _, values in rows for value in values]
    if after_completing is None:
        values_sql = ", ".join("(" + ", ".join(["%s"] * len(columns)) + ")" for _ in rows)
        inserts = f"added AS (INSERT INTO {_STEPS} ({', '.join(columns)}) VALUES {values_sql} RETURNING id),"  # noqa: S608
        guard, condition = "", ""
    else:
        # One INSERT … SELECT per step (each takes its parameters' types from the table's columns).
        select_list = ", ".join(["%s"] * len(columns))
        inserts = "".join(
            f"added_{index} AS (INSERT INTO {_STEPS} ({', '.join(columns)})"  # noqa: S608
            f" SELECT {select_list} FROM completed RETURNING id),"
            for index in range(len(rows))
        )
        guard = f"completed AS (SELECT 1 FROM {_STEPS} WHERE id = %s AND status = %s AND version = %s),"  # noqa: S608
        condition = " AND EXISTS (SELECT 1 FROM completed)"
        params = [after_completing.pk, StepStatus.COMPLETED, after_completing.version + 1, *params]
    statement = (
        f"WITH {guard}{inserts}"  # noqa: S608
        f" numbered AS (UPDATE {_SESSIONS} SET last_event_seq = last_event_seq + %s"
        f" WHERE id = %s{condition} RETURNING last_event_seq)" + NUMBERED_EVENTS_INSERT
    )
    params += [len(events), session_id, *numbered_insert_params(session_id, events)]
    return statement, params


def _mark_saved(steps: list[Step]) -> None:
    for step in steps:
        step._state.adding, step._state.db = False, "default"


_FINISH_RUN = (
    f"WITH finished AS (UPDATE {_RUNS} SET status = %s, version = version + 1, stop_reason = %s,"  # noqa: S608
    " error = %s, finished_at = %s, lease_owner = '', lease_expires_at = NULL"
    " WHERE id = %s AND status = %s AND version = %s"
    f" AND NOT EXISTS (SELECT 1 FROM {_RUNS} child WHERE child.parent_run_id = %s){{after_completing}}"
    " RETURNING id),"
    f" closed AS (UPDATE {_STEPS} SET status = %s, version = version + 1, finished_at = %s"
    " WHERE run_id = %s AND status IN (%s, %s) AND EXISTS (SELECT 1 FROM finished) RETURNING id),"
    f" numbered AS (UPDATE {_SESSIONS} SET last_event_seq = last_event_seq + %s"
    " WHERE id = %s AND EXISTS (SELECT 1 FROM finished) RETURNING last_event_seq)" + NUMBERED_EVENTS_INSERT
)


def finish_run(
    run: Run,
    *,
    to_status: str,
    stop_reason: str,
    error: str,
    finished_at: datetime,
    events: list[PendingEvent],
) -> bool:
    """The run to a terminal state at its version, its open steps cancelled, the events.

    False (nothing written) when the run moved on or has children: a parent's end adds their usage.
    """
    statement, params = _finish_run_statement(
        run, to_status=to_status, stop_reason=stop_reason, error=error, finished_at=finished_at, events=events
    )
    return _execute_with_events(statement, params, run.session_id, events)


def _finish_run_statement(
    run: Run,
    *,
    to_status: str,
    stop_reason: str,
    error: str,
    finished_at: datetime,
    events: list[PendingEvent],
    after_completing: Step | None = None,
) -> tuple[str, list[Any]]:
    """``after_completing``: only if this step is completed at the version its completion gives it."""
    params = [*(to_status, stop_reason, error, finished_at, run.pk, run.status, run.version, run.pk)]
    if after_completing is not None:
        params += [after_completing.pk, StepStatus.COMPLETED, after_completing.version + 1]
    params += [
        *(StepStatus.CANCELLED, finished_at, run.pk, *_OPEN_STEP_STATUSES),
        *(len(events), run.session_id, *numbered_insert_params(run.session_id, events)),
    ]
    condition = _AFTER_COMPLETING if after_completing is not None else ""
    return _FINISH_RUN.format(after_completing=condition), params


def _execute_with_events(
    statement: str, params: list[Any], session_id: Any, events: list[PendingEvent]
) -> bool:
    return _announce(rows_of(statement, params), session_id, events)


def _announce_together(
    session_id: Any, written: list[tuple[list[tuple[Any, ...]], list[PendingEvent]]]
) -> None:
    """Statements committed together, each with the numbers of the events it stored (none if it
    wrote nothing): their events go out as one announcement. As several, a later one (the run's
    end) waited behind an earlier one's round trip on the channel layer."""
    stored = [(rows, events) for rows, events in written if rows]
    if stored:
        events = [event for _rows, batch in stored for event in batch]
        announce_on_commit(session_id, events, [seq for rows, _batch in stored for (seq,) in rows])


def _announce(rows: list[tuple[Any, ...]], session_id: Any, events: list[PendingEvent]) -> bool:
    """The events were stored if the statement returned their numbers: announce them on commit."""
    sequence_numbers = [seq for (seq,) in rows]
    if not sequence_numbers:
        return False
    announce_on_commit(session_id, events, sequence_numbers)
    return True

"""``/ws/sessions/{id}/?after=SEQ``: a session's events, live, plus chat commands.

Close codes: 4400 bad ``after``, 4401 not authenticated, 4403 no tenant membership,
4404 unknown session or another tenant's, or a path that is no websocket of ours. Every close
comes after the handshake so the client can read the code; nothing is sent before it. An open
socket is authorized again every ``STREAM_REAUTHORIZE_SECONDS`` and closes with the same codes
once its key is revoked or its user is no longer a member.
"""

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from rest_framework.serializers import Serializer

from core.errors import DATABASE_UNAVAILABLE_ERRORS
from core.middleware import REDIS_UNAVAILABLE_ERRORS
from sessions import cancel, decisions, services
from sessions.api import IDEMPOTENCY_KEY_MAX_LENGTH
from sessions.branches import SHOWN_BRANCH
from sessions.event_store import Envelope
from sessions.models import Run, Session
from sessions.selectors import run_get_for_actor, session_get_for_actor
from sessions.serializers import AnswerSerializer, ApproveSerializer, MessageCreateSerializer
from sessions.services import LaneBusy
from sessions.state import InvalidTransition, StaleTransition
from sessions.streams import (
    EventSource,
    authenticate_token,
    envelope_text,
    parse_after,
    stream_hub,
    while_authorized,
)
from tenants.actors import ACTIVE_TENANT_SESSION_KEY, Actor, actor_for_user
from tenants.quotas import QuotaExceeded
from tenants.sign_in_throttle import counted_address

logger = logging.getLogger(__name__)

CLOSE_BAD_REQUEST = 4400
CLOSE_NOT_AUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
# The address sent too many wrong API keys (tenants.sign_in_throttle); as HTTP's 429.
CLOSE_TOO_MANY_WRONG_KEYS = 4429
CLOSE_INTERNAL_ERROR = 1011
BEARER_SUBPROTOCOL = "bearer"
HEARTBEAT = json.dumps({"type": "heartbeat"})


def heartbeat_seconds() -> float:
    return float(getattr(settings, "STREAM_HEARTBEAT_SECONDS", 20.0))


class CommandError(Exception):
    """A command's refusal, sent as ``{"type": "error", "code", "message", "fields"}``."""

    def __init__(
        self, code: str, message: str, fields: dict[str, list[str]] | None = None, **extra: Any
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.fields = fields or {}
        self.extra = extra

    @classmethod
    def invalid(cls, fields: dict[str, list[str]]) -> "CommandError":
        message = "; ".join(f"{name}: {' '.join(messages)}" for name, messages in fields.items())
        return cls("invalid", message, fields)

    def frame(self) -> dict[str, Any]:
        return {
            "type": "error",
            "code": self.code,
            "message": self.message,
            "fields": self.fields,
            **self.extra,
        }


def bearer_token(scope: dict[str, Any]) -> str | None:
    """An API key offered as subprotocols ``["bearer", key]`` or as ``?token=``."""
    subprotocols = list(scope.get("subprotocols") or [])
    if BEARER_SUBPROTOCOL in subprotocols:
        position = subprotocols.index(BEARER_SUBPROTOCOL)
        if position + 1 < len(subprotocols):
            return str(subprotocols[position + 1])
    tokens = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token")
    return tokens[0] if tokens else None


def actor_for_scope(scope: dict[str, Any]) -> tuple[Actor | None, int]:
    """The socket's actor, or the close code that refuses it."""
    token = bearer_token(scope)
    if token is not None:
        client = scope.get("client") or ("", 0)
        result = authenticate_token(token, address=counted_address(str(client[0])))
        if result.retry_after:
            return None, CLOSE_TOO_MANY_WRONG_KEYS
        if not result.is_valid_key:
            return None, CLOSE_NOT_AUTHENTICATED
        return result.actor, CLOSE_FORBIDDEN
    user = scope.get("user")
    if user is None or not user.is_authenticated:
        return None, CLOSE_NOT_AUTHENTICATED
    browser_session = scope.get("session")
    preferred = browser_session.get(ACTIVE_TENANT_SESSION_KEY) if browser_session is not None else None
    return actor_for_user(user, preferred_tenant_id=preferred), CLOSE_FORBIDDEN


def authorize_scope(scope: dict[str, Any], session_id: str) -> tuple[Actor | None, Session | None, int]:
    """The actor and the session they may watch, or the close code that refuses the socket."""
    actor, refusal = actor_for_scope(scope)
    if actor is None:
        return None, None, refusal
    try:
        return actor, session_get_for_actor(actor=actor, session_id=session_id), 0
    except Http404:
        return actor, None, CLOSE_NOT_FOUND


class SessionEventsConsumer(AsyncWebsocketConsumer):
    # The stream hub holds this process's one layer subscription per session; a layer
    # channel per socket would go unused, so this alias deliberately names no layer.
    channel_layer_alias = "agentry-no-channel-layer"

    session: Session
    _pump: asyncio.Task[None] | None = None
    # The close code of a refusal found by a later authorization check.
    _refusal = 0

    async def connect(self) -> None:
        self._send_lock = asyncio.Lock()
        subprotocols = self.scope.get("subprotocols") or []
        await self.accept(BEARER_SUBPROTOCOL if BEARER_SUBPROTOCOL in subprotocols else None)
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        try:
            after = parse_after((query.get("after") or [None])[0])
        except ValueError:
            await self.close(CLOSE_BAD_REQUEST)
            return
        actor, session, refusal = await database_sync_to_async(authorize_scope)(
            self.scope, self.scope["url_route"]["kwargs"]["session_id"]
        )
        if actor is None or session is None:
            await self.close(refusal)
            return
        self.session = session
        self._pump = asyncio.get_running_loop().create_task(self._stream(after))
        self._pump.add_done_callback(self._on_stream_end)

    async def disconnect(self, code: int) -> None:
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump

    async def _stream(self, after: int) -> None:
        events = while_authorized(
            self._session_events(after),
            is_authorized=self._is_still_authorized,
            heartbeat_seconds=heartbeat_seconds(),
        )
        async with aclosing(events):
            async for envelope in events:
                try:
                    await self._send_text(HEARTBEAT if envelope is None else envelope_text(envelope))
                except OSError:
                    return  # the client went away; websocket_disconnect follows
        # Access was withdrawn (the code a new socket would get), or the session was deleted.
        await self._close_quietly(self._refusal or CLOSE_NOT_FOUND)

    def _session_events(self, after: int) -> EventSource:
        async def events(idle_seconds: float) -> AsyncGenerator[Envelope | None, None]:
            async with stream_hub().subscribe(self.session.pk, after) as subscription:
                async for envelope in subscription.events(idle_seconds=idle_seconds):
                    yield envelope

        return events

    async def _is_still_authorized(self) -> bool:
        """Authorize again as at connect: a revoked key or a removed member closes the socket."""
        _actor, session, refusal = await database_sync_to_async(authorize_scope)(
            self.scope, str(self.session.pk)
        )
        self._refusal = refusal if session is None else 0
        return session is not None

    def _on_stream_end(self, task: "asyncio.Task[None]") -> None:
        if task.cancelled() or task.exception() is None:
            return
        logger.error("session %s stream failed", self.session.pk, exc_info=task.exception())
        asyncio.get_running_loop().create_task(self._close_quietly(CLOSE_INTERNAL_ERROR))

    async def _close_quietly(self, code: int) -> None:
        with contextlib.suppress(OSError):
            await self.close(code)

    async def _send_frame(self, frame: dict[str, Any]) -> None:
        await self._send_text(json.dumps(frame))

    async def _send_text(self, text: str) -> None:
        async with self._send_lock:
            await self.send(text_data=text)

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        if self._pump is None:
            return  # a refused socket: it is closing
        request_id: Any = None
        try:
            command = json.loads(text_data) if text_data is not None else None
            if not isinstance(command, dict):
                raise CommandError("invalid", "Send a JSON object with a type.")
            request_id = command.get("id")
            reply = await self._run_command(command)
        except json.JSONDecodeError:
            reply = CommandError("invalid_json", "The frame is not valid JSON.").frame()
        except RecursionError:
            reply = CommandError("invalid_json", "The frame is nested too deeply.").frame()
        except CommandError as error:
            reply = error.frame()
        if request_id is not None:
            reply["id"] = request_id
        await self._send_frame(reply)

    async def _run_command(self, command: dict[str, Any]) -> dict[str, Any]:
        command_type = command.get("type")
        handler = COMMANDS.get(command_type) if isinstance(command_type, str) else None
        if handler is None:
            raise CommandError("unknown_command", "Commands are message, cancel, approve and answer.")
        try:
            return await run_command(handler, self.scope, str(self.session.pk), command)
        except CommandError:
            raise
        except Http404 as error:
            raise CommandError("not_found", "Not found.") from error
        except PermissionDenied as error:
            message = str(error) or "Your role does not allow this action."
            raise CommandError("permission_denied", message) from error
        except ValidationError as error:
            has_fields = hasattr(error, "error_dict")
            raise CommandError.invalid(
                error.message_dict if has_fields else {"non_field_errors": error.messages}
            ) from error
        except LaneBusy as busy:
            active = str(busy.active_run_id)
            message = f"Run {active} is active in this session."
            raise CommandError("run_active", message, {"active_run": [active]}) from busy
        except QuotaExceeded as exceeded:
            retry_after = exceeded.retry_after_seconds
            raise CommandError(exceeded.code, exceeded.message, retry_after=retry_after) from exceeded
        except (InvalidTransition, StaleTransition) as error:
            raise CommandError("conflict", "The run changed meanwhile; try again.") from error
        except REDIS_UNAVAILABLE_ERRORS as error:
            message = "A service this request needs is unavailable; try again shortly."
            raise CommandError("service_unavailable", message) from error
        except DATABASE_UNAVAILABLE_ERRORS as error:
            message = "The database is unavailable; try again shortly."
            raise CommandError("database_unavailable", message) from error
        except Exception as error:  # a failed command must never end the stream
            logger.exception("websocket command %s failed", command_type)
            raise CommandError("server_error", "Internal error; it has been logged.") from error


class UnknownPathConsumer(AsyncWebsocketConsumer):
    """A websocket to a path that is none of ours: accepted, then closed with 4404."""

    channel_layer_alias = "agentry-no-channel-layer"

    async def connect(self) -> None:
        await self.accept()
        await self.close(CLOSE_NOT_FOUND)


CommandHandler = Callable[[Actor, Session, dict[str, Any]], dict[str, Any]]


@database_sync_to_async
def run_command(
    handler: CommandHandler, scope: dict[str, Any], session_id: str, command: dict[str, Any]
) -> dict[str, Any]:
    """Authorize again, as each REST request does: a revoked key or a lowered role counts at once."""
    actor, session, refusal = authorize_scope(scope, session_id)
    if actor is None:
        code = "not_authenticated" if refusal == CLOSE_NOT_AUTHENTICATED else "permission_denied"
        raise CommandError(code, "Your credentials no longer allow this action.")
    if session is None:
        raise CommandError("not_found", "Not found.")
    return handler(actor, session, command)


def post_message(actor: Actor, session: Session, command: dict[str, Any]) -> dict[str, Any]:
    """``{"type": "message", "content", "attachments"?, "multitask"?, "parent_id"?, "idempotency_key"?}``,
    as the REST POST: a ``parent_id`` posts the message as a branch from that message."""
    fields = _validated(MessageCreateSerializer, command, extra=("idempotency_key",))
    key = command.get("idempotency_key")
    if key is not None and (not isinstance(key, str) or len(key) > IDEMPOTENCY_KEY_MAX_LENGTH):
        raise CommandError.invalid(
            {"idempotency_key": [f"Use a string of at most {IDEMPOTENCY_KEY_MAX_LENGTH} characters."]}
        )
    posted = services.session_post_message(
        actor=actor,
        session=session,
        content=fields["content"],
        multitask=fields["multitask"],
        idempotency_key=key or None,
        attachments=fields.get("attachments", ()),
        parent_id=fields.get("parent_id", SHOWN_BRANCH),
    )
    return {
        "type": "ack",
        "command": "message",
        "message_id": str(posted.message.pk),
        "run_id": str(posted.run.pk),
    }


def cancel_run(actor: Actor, session: Session, command: dict[str, Any]) -> dict[str, Any]:
    """``{"type": "cancel", "run_id"}``."""
    run = cancel.run_cancel(actor=actor, run=_run_of_session(actor, session, command))
    return {"type": "ack", "command": "cancel", "run_id": str(run.pk), "status": run.status}


def approve_tool_call(actor: Actor, session: Session, command: dict[str, Any]) -> dict[str, Any]:
    """``{"type": "approve", "run_id", "tool_call_id", "decision": "approve"|"deny", "reason"?}``."""
    run = _run_of_session(actor, session, command)
    fields = _validated(ApproveSerializer, command, extra=("run_id",))
    approval = decisions.run_approve(actor=actor, run=run, **fields)
    return {
        "type": "ack",
        "command": "approve",
        "run_id": str(run.pk),
        "tool_call_id": approval.tool_call_id,
        "status": approval.status,
    }


def answer_question(actor: Actor, session: Session, command: dict[str, Any]) -> dict[str, Any]:
    """``{"type": "answer", "run_id", "tool_call_id", "answer"}``: an ask_user question's answer."""
    run = _run_of_session(actor, session, command)
    fields = _validated(AnswerSerializer, command, extra=("run_id",))
    question = decisions.run_answer(actor=actor, run=run, **fields)
    return {
        "type": "ack",
        "command": "answer",
        "run_id": str(run.pk),
        "tool_call_id": question.tool_call_id,
        "status": question.status,
    }


COMMANDS: dict[str, CommandHandler] = {
    "message": post_message,
    "cancel": cancel_run,
    "approve": approve_tool_call,
    "answer": answer_question,
}


def _run_of_session(actor: Actor, session: Session, command: dict[str, Any]) -> Run:
    """A run of this socket's session: another session's run is as unknown as a missing one."""
    run_id = command.get("run_id")
    if not isinstance(run_id, str):
        raise CommandError.invalid({"run_id": ["This field is required."]})
    run = run_get_for_actor(actor=actor, run_id=run_id)
    if run.session_id != session.pk:
        raise CommandError("not_found", "Not found.")
    return run


def _validated(serializer_class: type[Serializer], command: dict[str, Any], *, extra: tuple[str, ...]) -> Any:
    """The command's fields checked by the REST endpoint's own serializer."""
    ignored = {"type", "id", *extra}
    serializer = serializer_class(
        data={name: value for name, value in command.items() if name not in ignored}
    )
    if not serializer.is_valid():
        raise CommandError.invalid(
            {name: [str(message) for message in messages] for name, messages in serializer.errors.items()}
        )
    return serializer.validated_data

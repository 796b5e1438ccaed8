"""How many of the server's pooled threads may wait on services outside this deployment at once.

A view that waits on an outside service (a tenant's MCP server, a model provider checking a
tenant's key) holds its thread for as long as that service takes, up to its timeout, and a
tenant chooses where such requests go. Were every pooled thread (``core.http_application``) to
wait on one, no other request of any tenant would be answered meanwhile. So at most a quarter of
the pool may wait outside at once; a request beyond that answers 503 at once, and the other
threads stay free for everyone else's requests.
"""

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from core.api.errors import ServerBusy

# The share of the pool whose thread runs the current request; None off the pool (a task, or a
# request Django's ASGI handler runs on a thread of its own, which holds no pooled thread).
_pool_share: ContextVar[threading.BoundedSemaphore | None] = ContextVar("outside_wait_share", default=None)
# Whether the current request holds a share already: its waits (a name resolved, then a call
# to it) take one share between them, one after the other.
_holds_a_share: ContextVar[bool] = ContextVar("holds_an_outside_wait_share", default=False)


def outside_wait_slots(threads: int) -> int:
    """How many of a pool's threads may wait outside at once: a quarter, at least one."""
    return max(1, threads // 4)


@contextmanager
def on_pooled_thread(share: threading.BoundedSemaphore) -> Iterator[None]:
    """Around a request a pooled thread runs: its outside waits count against ``share``."""
    token = _pool_share.set(share)
    try:
        yield
    finally:
        _pool_share.reset(token)


@contextmanager
def waiting_outside() -> Iterator[None]:
    """Around a wait on an outside service; raises ``ServerBusy`` (503) at once when the request
    runs on a pooled thread and its pool's share for such waits is taken."""
    share = _pool_share.get()
    if share is None or _holds_a_share.get():
        yield
        return
    if not share.acquire(blocking=False):
        raise ServerBusy()
    holding = _holds_a_share.set(True)
    try:
        yield
    finally:
        _holds_a_share.reset(holding)
        share.release()

"""Enqueueing django-q2 tasks the way every Agentry task is enqueued."""

from collections.abc import Callable
from typing import Any

from django_q.brokers import Broker
from django_q.tasks import async_task


def enqueue_task(
    function: Callable[..., Any], *args: Any, task_name: str, broker: Broker | None = None
) -> str:
    """Queue ``function(*args)``; returns the task's id.

    A task that succeeds is not saved as a django-q2 result: what it did has its own record
    (the run, the memories, the server's health), and saving one makes django-q2's monitor
    load and lock every saved success to prune them (``Q_SAVE_LIMIT``), each time. A task
    that fails is still saved, with its error.
    """
    return str(async_task(function, *args, task_name=task_name, broker=broker, save=False))

"""core.tasks.enqueue_task: a task that succeeds leaves no django-q2 result behind; one that fails does."""

from typing import Any

import pytest
from django.utils import timezone
from django_q.models import Failure, Success, Task
from django_q.monitor import save_task
from django_q.signing import SignedPackage

from core.tasks import enqueue_task


def add(a: int, b: int) -> int:
    return a + b


class CapturingBroker:
    """Keeps the signed packages it is given instead of queueing them."""

    list_key = "capturing"

    def __init__(self) -> None:
        self.packages: list[str] = []

    def enqueue(self, package: str) -> str:
        self.packages.append(package)
        return str(len(self.packages))

    def acknowledge(self, ack_id: str) -> None:
        pass


def finished(task: dict[str, Any], *, success: bool, result: object) -> dict[str, Any]:
    """The package as a django-q2 worker hands it to the monitor once the function returned
    (``sync``: the monitor then leaves the test's database connection open)."""
    now = timezone.now()
    return {**task, "success": success, "result": result, "started": now, "stopped": now, "sync": True}


@pytest.mark.django_db
def test_a_task_that_succeeds_is_not_saved_and_one_that_fails_is() -> None:
    broker: Any = CapturingBroker()
    first_id = enqueue_task(add, 2, 3, task_name="adding", broker=broker)
    second_id = enqueue_task(add, 2, "x", task_name="failing", broker=broker)
    first, second = (SignedPackage.loads(package) for package in broker.packages)
    assert (first["id"], first["args"], second["id"]) == (first_id, (2, 3), second_id)

    save_task(finished(first, success=True, result=5), broker)
    save_task(finished(second, success=False, result="TypeError: unsupported operand"), broker)

    assert Success.objects.count() == 0
    failure = Failure.objects.get()
    assert (failure.id, failure.name) == (second_id, "failing")
    assert failure.result == "TypeError: unsupported operand"
    assert Task.objects.count() == 1

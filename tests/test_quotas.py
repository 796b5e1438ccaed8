"""Per-tenant rate limits and quotas: sliding 60 s windows, exact Retry-After, tenant overrides."""

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from core.api.errors import api_exception_handler
from core.api.quota_errors import QuotaThrottled
from sessions.models import Run, RunStatus, Session, Step, StepKind, StepStatus
from sessions.state import ACTIVE_RUN_STATUSES
from sessions.statements.post_reads import QuotaCounts, quota_counts
from tenants.actors import Actor
from tenants.models import Role, Tenant
from tenants.quotas import (
    RATE_WINDOW,
    QuotaExceeded,
    check_active_runs,
    check_message_rate,
    check_model_token_rate,
    check_post_message_quotas,
)
from tests.conftest import Cast
from tests.factories import make_agent, make_user

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 2, 12, 0, 0, tzinfo=UTC)
_step_index = itertools.count()


@pytest.fixture(autouse=True)
def frozen_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timezone, "now", lambda: NOW)


def actor_for(user: Any, tenant: Tenant, role: str = Role.MEMBER) -> Actor:
    return Actor(user=user, tenant=tenant, role=role)


def make_run(tenant: Tenant, user: Any, *, seconds_ago: float = 30, status: str = RunStatus.COMPLETED) -> Run:
    session = Session.objects.create(tenant=tenant, agent=make_agent(tenant=tenant), created_by=user)
    run = Run.objects.create(
        tenant=tenant, session=session, agent=session.agent, created_by=user, status=status
    )
    # created_at is auto_now_add: only an update can move it into the past.
    Run.objects.filter(pk=run.pk).update(created_at=NOW - timedelta(seconds=seconds_ago))
    return run


def make_runs(tenant: Tenant, user: Any, count: int, *, seconds_ago: float = 30) -> None:
    for _ in range(count):
        make_run(tenant, user, seconds_ago=seconds_ago)


def make_step(run: Run, *, input_tokens: int, output_tokens: int, seconds_ago: float | None) -> Step:
    finished_at = None if seconds_ago is None else NOW - timedelta(seconds=seconds_ago)
    return Step.objects.create(
        run=run,
        tenant_id=run.tenant_id,
        index=next(_step_index),
        kind=StepKind.MODEL_CALL,
        status=StepStatus.COMPLETED,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        finished_at=finished_at,
    )


def set_tenant_limits(tenant: Tenant, **limits: Any) -> None:
    tenant.settings = {**tenant.settings, **limits}
    tenant.save(update_fields=["settings"])


# --- messages per minute per user -------------------------------------------------------


def test_message_rate_at_the_limit_is_exceeded_until_the_oldest_run_leaves_the_window(cast: Cast) -> None:
    make_run(cast.tenant_a, cast.bob, seconds_ago=45.2)
    make_runs(cast.tenant_a, cast.bob, 19, seconds_ago=10)

    with pytest.raises(QuotaExceeded) as raised:
        check_message_rate(actor=actor_for(cast.bob, cast.tenant_a))

    assert raised.value.code == "rate_limited"
    assert raised.value.message == "Message limit reached: 20 per minute per user in this workspace."
    assert raised.value.retry_after_seconds == 15  # 60 - 45.2 = 14.8, rounded up


def test_message_rate_one_under_the_limit_is_allowed(cast: Cast) -> None:
    make_runs(cast.tenant_a, cast.bob, 19, seconds_ago=1)

    check_message_rate(actor=actor_for(cast.bob, cast.tenant_a))


@pytest.mark.parametrize(("oldest_seconds_ago", "retry_after"), [(60, None), (59.9, 1), (0.5, 60)])
def test_message_rate_window_slides(cast: Cast, oldest_seconds_ago: float, retry_after: int | None) -> None:
    make_run(cast.tenant_a, cast.bob, seconds_ago=oldest_seconds_ago)
    make_runs(cast.tenant_a, cast.bob, 19, seconds_ago=0)

    if retry_after is None:
        check_message_rate(actor=actor_for(cast.bob, cast.tenant_a))
    else:
        with pytest.raises(QuotaExceeded) as raised:
            check_message_rate(actor=actor_for(cast.bob, cast.tenant_a))
        assert raised.value.retry_after_seconds == retry_after


def test_message_rate_over_the_limit_waits_for_the_limit_th_newest_run(cast: Cast) -> None:
    set_tenant_limits(cast.tenant_a, messages_per_minute_per_user=2)
    for seconds_ago in (50, 40, 20):
        make_run(cast.tenant_a, cast.bob, seconds_ago=seconds_ago)

    with pytest.raises(QuotaExceeded) as raised:
        check_message_rate(actor=actor_for(cast.bob, cast.tenant_a))

    # Once the run of 40 s ago leaves, one run (20 s ago) is left: under the limit of 2.
    assert raised.value.retry_after_seconds == 20
    assert raised.value.message == "Message limit reached: 2 per minute per user in this workspace."


def test_message_rate_tenant_override_raises_the_limit(cast: Cast) -> None:
    set_tenant_limits(cast.tenant_a, messages_per_minute_per_user=21)
    make_runs(cast.tenant_a, cast.bob, 20)

    check_message_rate(actor=actor_for(cast.bob, cast.tenant_a))


def test_message_rate_counts_only_the_users_runs_in_the_tenant(cast: Cast) -> None:
    make_user(cast.bob.email, tenant=cast.tenant_b, role=Role.MEMBER)
    make_runs(cast.tenant_b, cast.bob, 20)
    make_runs(cast.tenant_a, cast.alice, 20)
    make_runs(cast.tenant_a, cast.bob, 19)

    check_message_rate(actor=actor_for(cast.bob, cast.tenant_a))


# --- model tokens per minute per tenant -------------------------------------------------


def test_model_token_rate_at_the_limit_is_exceeded_until_the_oldest_step_leaves_the_window(
    cast: Cast,
) -> None:
    run = make_run(cast.tenant_a, cast.bob)
    make_step(run, input_tokens=15_000, output_tokens=5_000, seconds_ago=50)
    make_step(run, input_tokens=9_000, output_tokens=1_000, seconds_ago=5)

    with pytest.raises(QuotaExceeded) as raised:
        check_model_token_rate(tenant=cast.tenant_a)

    assert raised.value.code == "rate_limited"
    assert raised.value.message == "Model token limit reached: 30000 per minute in this workspace."
    assert raised.value.retry_after_seconds == 10


def test_model_token_rate_one_under_the_limit_is_allowed(cast: Cast) -> None:
    run = make_run(cast.tenant_a, cast.bob)
    make_step(run, input_tokens=15_000, output_tokens=5_000, seconds_ago=50)
    make_step(run, input_tokens=9_000, output_tokens=999, seconds_ago=5)

    check_model_token_rate(tenant=cast.tenant_a)


def test_model_token_rate_over_the_limit_waits_until_the_rest_fits(cast: Cast) -> None:
    run = make_run(cast.tenant_a, cast.bob)
    for tokens, seconds_ago in ((10_000, 55), (10_000, 30), (15_000, 20), (10_000, 5)):
        make_step(run, input_tokens=tokens, output_tokens=0, seconds_ago=seconds_ago)

    with pytest.raises(QuotaExceeded) as raised:
        check_model_token_rate(tenant=cast.tenant_a)

    # Newest first the running totals are 10k, 25k, 35k: the step of 30 s ago must leave.
    assert raised.value.retry_after_seconds == 30


def test_model_token_rate_steps_finishing_together_leave_the_window_together(cast: Cast) -> None:
    run = make_run(cast.tenant_a, cast.bob)
    make_step(run, input_tokens=20_000, output_tokens=0, seconds_ago=30)
    make_step(run, input_tokens=5_000, output_tokens=0, seconds_ago=12.5)
    make_step(run, input_tokens=5_000, output_tokens=0, seconds_ago=12.5)

    with pytest.raises(QuotaExceeded) as raised:
        check_model_token_rate(tenant=cast.tenant_a)

    assert raised.value.retry_after_seconds == 30


@pytest.mark.parametrize(("oldest_seconds_ago", "retry_after"), [(60, None), (59.5, 1)])
def test_model_token_rate_window_slides(
    cast: Cast, oldest_seconds_ago: float, retry_after: int | None
) -> None:
    run = make_run(cast.tenant_a, cast.bob)
    make_step(run, input_tokens=29_000, output_tokens=0, seconds_ago=oldest_seconds_ago)
    make_step(run, input_tokens=1_000, output_tokens=0, seconds_ago=0)

    if retry_after is None:
        check_model_token_rate(tenant=cast.tenant_a)
    else:
        with pytest.raises(QuotaExceeded) as raised:
            check_model_token_rate(tenant=cast.tenant_a)
        assert raised.value.retry_after_seconds == retry_after


def test_model_token_rate_ignores_unfinished_steps(cast: Cast) -> None:
    run = make_run(cast.tenant_a, cast.bob)
    make_step(run, input_tokens=40_000, output_tokens=0, seconds_ago=None)

    check_model_token_rate(tenant=cast.tenant_a)


def test_model_token_rate_tenant_override_lowers_the_limit(cast: Cast) -> None:
    set_tenant_limits(cast.tenant_a, model_tokens_per_minute=100)
    run = make_run(cast.tenant_a, cast.bob)
    make_step(run, input_tokens=60, output_tokens=40, seconds_ago=1)

    with pytest.raises(QuotaExceeded) as raised:
        check_model_token_rate(tenant=cast.tenant_a)

    assert raised.value.message == "Model token limit reached: 100 per minute in this workspace."
    assert raised.value.retry_after_seconds == 59


def test_model_token_rate_counts_only_the_tenants_steps(cast: Cast) -> None:
    make_step(make_run(cast.tenant_b, cast.carol), input_tokens=50_000, output_tokens=0, seconds_ago=1)
    make_step(make_run(cast.tenant_a, cast.bob), input_tokens=29_999, output_tokens=0, seconds_ago=1)

    check_model_token_rate(tenant=cast.tenant_a)
    with pytest.raises(QuotaExceeded):
        check_model_token_rate(tenant=cast.tenant_b)


# --- active runs per user ----------------------------------------------------------------


def test_active_runs_at_the_limit_is_exceeded(cast: Cast) -> None:
    for status in (RunStatus.PLANNING, RunStatus.AWAITING_APPROVAL, RunStatus.CANCELLING):
        make_run(cast.tenant_a, cast.bob, status=status)

    with pytest.raises(QuotaExceeded) as raised:
        check_active_runs(actor=actor_for(cast.bob, cast.tenant_a))

    assert raised.value.code == "rate_limited"
    assert raised.value.message == "Active run limit reached: 3 at once per user in this workspace."
    assert raised.value.retry_after_seconds == 5


def test_active_runs_counts_neither_queued_nor_finished_runs(cast: Cast) -> None:
    for status in (
        RunStatus.EXECUTING,
        RunStatus.EXECUTING,
        RunStatus.QUEUED,
        RunStatus.CREATED,
        RunStatus.COMPLETED,
        RunStatus.FAILED,
        RunStatus.CANCELLED,
        RunStatus.TIMEOUT,
    ):
        make_run(cast.tenant_a, cast.bob, status=status)

    check_active_runs(actor=actor_for(cast.bob, cast.tenant_a))


def test_active_runs_tenant_override_lowers_the_limit(cast: Cast) -> None:
    set_tenant_limits(cast.tenant_a, active_runs_per_user=1)
    make_run(cast.tenant_a, cast.bob, status=RunStatus.EXECUTING)

    with pytest.raises(QuotaExceeded) as raised:
        check_active_runs(actor=actor_for(cast.bob, cast.tenant_a))

    assert raised.value.message == "Active run limit reached: 1 at once per user in this workspace."


def test_active_runs_counts_only_the_users_runs_in_the_tenant(cast: Cast) -> None:
    make_user(cast.bob.email, tenant=cast.tenant_b, role=Role.MEMBER)
    for _ in range(3):
        make_run(cast.tenant_b, cast.bob, status=RunStatus.EXECUTING)
        make_run(cast.tenant_a, cast.alice, status=RunStatus.EXECUTING)
    make_run(cast.tenant_a, cast.bob, status=RunStatus.EXECUTING)
    make_run(cast.tenant_a, cast.bob, status=RunStatus.EXECUTING)

    check_active_runs(actor=actor_for(cast.bob, cast.tenant_a))


# --- all together, limits, and the API answer ----------------------------------------------


def test_post_message_quotas_pass_under_every_limit(cast: Cast) -> None:
    make_run(cast.tenant_a, cast.bob, status=RunStatus.EXECUTING)
    make_step(make_run(cast.tenant_a, cast.bob), input_tokens=1_000, output_tokens=0, seconds_ago=1)

    check_post_message_quotas(actor=actor_for(cast.bob, cast.tenant_a))


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"active_runs_per_user": 1}, "Active run limit reached: 1 at once per user in this workspace."),
        (
            {"messages_per_minute_per_user": 2},
            "Message limit reached: 2 per minute per user in this workspace.",
        ),
        ({"model_tokens_per_minute": 1_000}, "Model token limit reached: 1000 per minute in this workspace."),
    ],
)
def test_post_message_quotas_enforce_each_limit(cast: Cast, limits: dict[str, int], message: str) -> None:
    set_tenant_limits(cast.tenant_a, **limits)
    make_run(cast.tenant_a, cast.bob, status=RunStatus.EXECUTING)
    make_step(make_run(cast.tenant_a, cast.bob), input_tokens=1_000, output_tokens=0, seconds_ago=1)

    with pytest.raises(QuotaExceeded) as raised:
        check_post_message_quotas(actor=actor_for(cast.bob, cast.tenant_a))

    assert raised.value.message == message


def test_one_statement_counts_only_the_authors_runs_and_the_tenants_steps_in_the_window(cast: Cast) -> None:
    make_run(cast.tenant_a, cast.bob, status=RunStatus.EXECUTING, seconds_ago=30)
    make_run(cast.tenant_a, cast.bob, status=RunStatus.AWAITING_APPROVAL, seconds_ago=90)
    make_run(cast.tenant_a, cast.bob, status=RunStatus.QUEUED, seconds_ago=59)
    counted = make_run(cast.tenant_a, cast.bob, seconds_ago=10)
    make_step(counted, input_tokens=300, output_tokens=40, seconds_ago=59)
    make_step(counted, input_tokens=7, output_tokens=0, seconds_ago=61)
    make_step(counted, input_tokens=5, output_tokens=5, seconds_ago=None)
    others = make_run(cast.tenant_a, cast.alice, status=RunStatus.EXECUTING, seconds_ago=5)
    make_step(others, input_tokens=1_000, output_tokens=2, seconds_ago=1)
    foreign = make_run(cast.tenant_b, cast.carol, status=RunStatus.EXECUTING, seconds_ago=5)
    make_step(foreign, input_tokens=50_000, output_tokens=0, seconds_ago=1)

    counts = quota_counts(
        tenant_id=cast.tenant_a.pk,
        user_id=cast.bob.pk,
        since=NOW - RATE_WINDOW,
        active_statuses=sorted(ACTIVE_RUN_STATUSES),
    )

    # Bob's executing and awaiting runs; his three runs of the last minute; the tenant's steps
    # that finished in it (Alice's included, Carol's tenant not).
    assert counts == QuotaCounts(active_runs=2, recent_runs=3, recent_tokens=300 + 40 + 1_000 + 2)


@pytest.mark.parametrize("value", [0, -1, "20", True, None])
def test_a_limit_that_is_not_a_positive_integer_is_a_configuration_error(cast: Cast, value: object) -> None:
    set_tenant_limits(cast.tenant_a, messages_per_minute_per_user=value)

    with pytest.raises(ImproperlyConfigured) as raised:
        check_message_rate(actor=actor_for(cast.bob, cast.tenant_a))

    assert str(raised.value) == (
        f"Tenant tenant-a: messages_per_minute_per_user must be a positive integer, not {value!r}."
    )


def test_quota_exceeded_retries_after_at_least_one_second() -> None:
    assert QuotaExceeded("Slow down.", retry_after_seconds=0).retry_after_seconds == 1


def test_quota_throttled_answers_429_with_retry_after_and_the_error_body() -> None:
    exceeded = QuotaExceeded(
        "Message limit reached: 20 per minute per user in this workspace.", retry_after_seconds=15
    )

    response = api_exception_handler(QuotaThrottled(exceeded), {})

    assert response is not None
    assert response.status_code == 429
    assert response["Retry-After"] == "15"
    assert response.data == {
        "error": {
            "code": "rate_limited",
            "message": (
                "Message limit reached: 20 per minute per user in this workspace. "
                "Expected available in 15 seconds."
            ),
            "fields": {},
        }
    }

"""Migrations 0013-0014: the steps stored before them get their run's tenant, and going back works."""

import importlib
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("agent_sessions", "0012_existing_sessions_become_one_branch")]
AFTER = [("agent_sessions", "0014_member_and_tenant_indexes")]
FILL_MIGRATION = "sessions.migrations.0013_step_tenant"


def migrate(targets: list[tuple[str, str]]) -> Any:
    """Migrate to ``targets``; the historical models there."""
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor.loader.project_state(targets).apps


def migrate_to_latest() -> None:
    """Every app at its last migration again, as the rest of the suite expects the database."""
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


def stored_run_with_steps(apps: Any, slug: str, steps: int) -> Any:
    Tenant = apps.get_model("tenants", "Tenant")
    Agent = apps.get_model("agents", "Agent")
    Session = apps.get_model("agent_sessions", "Session")
    Run = apps.get_model("agent_sessions", "Run")
    Step = apps.get_model("agent_sessions", "Step")
    tenant = Tenant.objects.create(slug=slug, name=slug)
    agent = Agent.objects.create(tenant=tenant, name="agent")
    session = Session.objects.create(tenant=tenant, agent=agent)
    run = Run.objects.create(tenant=tenant, session=session, agent=agent, status="completed")
    for index in range(steps):
        Step.objects.create(run=run, index=index, kind="model_call", status="completed")
    return run


@pytest.mark.parametrize("runs_per_batch", [1, 2, 2_000])
@pytest.mark.django_db(transaction=True)
def test_steps_stored_before_get_their_runs_tenant(
    runs_per_batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fill goes through the runs in batches: one run, two, or all of them at a time.
    monkeypatch.setattr(importlib.import_module(FILL_MIGRATION), "RUNS_PER_BATCH", runs_per_batch)
    old = migrate(BEFORE)
    try:
        first = stored_run_with_steps(old, "tenant-a", steps=2)
        second = stored_run_with_steps(old, "tenant-b", steps=1)
        third = stored_run_with_steps(old, "tenant-e", steps=3)

        new = migrate(AFTER)

        Step = new.get_model("agent_sessions", "Step")
        assert sorted(Step.objects.values_list("run_id", "tenant_id")) == sorted(
            [(first.pk, first.tenant_id)] * 2
            + [(second.pk, second.tenant_id)]
            + [(third.pk, third.tenant_id)] * 3
        )
    finally:
        migrate_to_latest()


@pytest.mark.django_db(transaction=True)
def test_the_migrations_go_back_and_forth_with_steps_stored() -> None:
    migrate(AFTER)
    try:
        old = migrate(BEFORE)
        run = stored_run_with_steps(old, "tenant-c", steps=1)

        new = migrate(AFTER)
        back = migrate(BEFORE)

        Step = back.get_model("agent_sessions", "Step")
        assert list(Step.objects.values_list("run_id", flat=True)) == [run.pk]
        assert "tenant" not in {field.name for field in Step._meta.get_fields()}
        assert new.get_model("agent_sessions", "Step")._meta.get_field("tenant").null is False
    finally:
        migrate_to_latest()

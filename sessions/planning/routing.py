"""Routing: whether a run answers in its own loop or plans, decided without a model call of its own.

In planning mode ``auto`` the agent's own first model call decides: it answers, calls tools, or
calls ``create_plan`` (agents.runtime.plan_tool), which hands the request to the planner. In
``plan`` mode every message is planned; in ``direct`` mode none is. A run that plans stores
route ``complex`` and why; a run answered by its own loop stores no route (its steps show
whether it used tools).
"""

from sessions.models import Run, RunRoute
from sessions.recorder import DjangoRunRecorder

PLAN_MODE_REASON = "the agent's planning mode is plan"


def offers_create_plan(run: Run) -> bool:
    """Only top-level runs of ``auto`` agents may plan; executors and sub-agents never do."""
    return run.parent_run_id is None and run.agent_config.get("planning_mode") == "auto"


def route_to_plan_record(run: Run, *, reason: str, recorder: DjangoRunRecorder) -> None:
    """Store that the run plans, and why, and announce it as the router's ``run.status``."""
    Run.objects.filter(pk=run.pk).update(route=RunRoute.COMPLEX, route_reason=reason)
    run.route, run.route_reason = RunRoute.COMPLEX, reason
    recorder.emit(
        "run.status",
        {"from": run.status, "to": run.status, "actor": "router", "route": run.route, "reason": reason},
    )

"""The plan the planner writes, parsed and validated before anything runs.

Plain Python: the planner's JSON in, a ``PlanSpec`` or a list of errors out. The errors go back
to the model once, so they are written for it.
"""

import json
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StepSpec:
    key: str
    title: str
    instructions: str
    depends_on: tuple[str, ...]
    expected_output: str
    tools: tuple[str, ...]


@dataclass(frozen=True)
class PlanSpec:
    goal: str
    steps: tuple[StepSpec, ...]


JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def json_object_in(text: str) -> dict[str, Any] | None:
    """The JSON object in a model's answer (models wrap it in prose or code fences), if any."""
    match = JSON_OBJECT.search(text)
    if match is None:
        return None
    try:
        value = json.loads(match.group(0))
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def plan_parse(
    data: dict[str, Any] | None,
    *,
    max_steps: int,
    allowed_tools: frozenset[str],
    done_keys: frozenset[str] = frozenset(),
    allow_empty: bool = False,
) -> tuple[PlanSpec | None, list[str]]:
    """Validate the planner's answer; ``done_keys`` are earlier steps that may be depended on."""
    if data is None:
        return None, ["The answer was not a JSON object."]
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or (not raw_steps and not allow_empty):
        return None, ['"steps" must be a non-empty list.']
    if len(raw_steps) > max_steps:
        return None, [f"The plan has {len(raw_steps)} steps; at most {max_steps} are allowed."]
    errors: list[str] = []
    steps = [_step_spec(raw, index, errors, allowed_tools) for index, raw in enumerate(raw_steps, start=1)]
    if errors:
        return None, errors
    errors.extend(_dependency_errors(steps, done_keys))
    if errors:
        return None, errors
    return PlanSpec(goal=str(data.get("goal", "")).strip(), steps=tuple(steps)), []


def _step_spec(raw: Any, index: int, errors: list[str], allowed_tools: frozenset[str]) -> StepSpec:
    if not isinstance(raw, dict):
        errors.append(f"Step {index} is not an object.")
        raw = {}
    key = str(raw.get("id") or "").strip()
    title = str(raw.get("title") or "").strip()
    instructions = str(raw.get("instructions") or "").strip()
    for name, value in (("id", key), ("title", title), ("instructions", instructions)):
        if not value and isinstance(raw, dict) and raw:
            errors.append(f'Step {index} has no "{name}".')
    depends_on = raw.get("depends_on") or []
    tools = raw.get("tools") or []
    if not isinstance(depends_on, list) or not isinstance(tools, list):
        errors.append(f'Step {index}: "depends_on" and "tools" must be lists.')
        depends_on, tools = [], []
    for tool in tools:
        if str(tool) not in allowed_tools:
            errors.append(
                f"Step {key or index} needs the tool {tool!r}, which executors may not use "
                f"(they have only read-only tools: {', '.join(sorted(allowed_tools)) or 'none'})."
            )
    return StepSpec(
        key=key[:50],
        title=title[:300],
        instructions=instructions,
        depends_on=tuple(str(dependency) for dependency in depends_on),
        expected_output=str(raw.get("expected_output") or ""),
        tools=tuple(str(tool) for tool in tools),
    )


def _dependency_errors(steps: list[StepSpec], done_keys: frozenset[str]) -> list[str]:
    keys = [step.key for step in steps]
    duplicates = sorted({key for key in keys if keys.count(key) > 1})
    if duplicates:
        return [f"Step ids must be unique; repeated: {', '.join(duplicates)}."]
    known = set(keys) | done_keys
    errors = [
        f"Step {step.key} depends on unknown step {dependency!r}."
        for step in steps
        for dependency in step.depends_on
        if dependency not in known
    ]
    if not errors and (cycle := _cycle(steps)):
        errors.append(f"The dependencies form a cycle: {' → '.join(cycle)}.")
    return errors


def _cycle(steps: list[StepSpec]) -> list[str] | None:
    """One dependency cycle among the plan's own steps, as a path that returns to its start."""
    edges = {step.key: list(step.depends_on) for step in steps}
    state: dict[str, str] = {}

    def visit(key: str, path: list[str]) -> list[str] | None:
        state[key] = "open"
        for dependency in edges.get(key, []):
            if dependency not in edges:
                continue
            if state.get(dependency) == "open":
                return (
                    [*path[path.index(dependency) :], dependency] if dependency in path else [key, dependency]
                )
            if dependency not in state and (found := visit(dependency, [*path, dependency])):
                return found
        state[key] = "done"
        return None

    for step in steps:
        if step.key not in state and (found := visit(step.key, [step.key])):
            return found
    return None

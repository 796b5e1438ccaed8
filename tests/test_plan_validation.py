"""Validation of the planner's plans: plain Python, no database."""

from typing import Any

import pytest

from sessions.planning.plans import json_object_in, plan_parse

ALLOWED = frozenset({"web_search", "memory_search"})


def step(key: str, *depends_on: str, tools: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "id": key,
        "title": key.upper(),
        "instructions": f"do {key}",
        "depends_on": list(depends_on),
        "tools": list(tools),
    }


def test_a_valid_plan_keeps_its_steps_and_dependencies() -> None:
    spec, errors = plan_parse(
        {"goal": "g", "steps": [step("s1"), step("s2"), step("s3", "s1", "s2", tools=("web_search",))]},
        max_steps=3,
        allowed_tools=ALLOWED,
    )

    assert errors == []
    assert spec is not None
    assert spec.goal == "g"
    assert [(s.key, s.depends_on, s.tools) for s in spec.steps] == [
        ("s1", (), ()),
        ("s2", (), ()),
        ("s3", ("s1", "s2"), ("web_search",)),
    ]


@pytest.mark.parametrize(
    ("plan", "error"),
    [
        (None, "The answer was not a JSON object."),
        ({"steps": []}, '"steps" must be a non-empty list.'),
        (
            {"steps": [step("a"), step("b"), step("c"), step("d")]},
            "The plan has 4 steps; at most 3 are allowed.",
        ),
        ({"steps": [step("a", "zz")]}, "Step a depends on unknown step 'zz'."),
        ({"steps": [step("a"), step("a")]}, "Step ids must be unique; repeated: a."),
        (
            {"steps": [step("a", "c"), step("b", "a"), step("c", "b")]},
            "The dependencies form a cycle: a → c → b → a.",
        ),
        ({"steps": [step("a", "a")]}, "The dependencies form a cycle: a → a."),
        (
            {"steps": [step("a", tools=("memory_save",))]},
            "Step a needs the tool 'memory_save', which executors may not use "
            "(they have only read-only tools: memory_search, web_search).",
        ),
    ],
)
def test_invalid_plans_are_rejected_with_errors_for_the_model(
    plan: dict[str, Any] | None, error: str
) -> None:
    spec, errors = plan_parse(plan, max_steps=3, allowed_tools=ALLOWED)

    assert (spec, errors) == (None, [error])


def test_a_revision_may_depend_on_completed_steps_and_be_empty() -> None:
    spec, errors = plan_parse(
        {"steps": [step("s4", "s1")]}, max_steps=3, allowed_tools=ALLOWED, done_keys=frozenset({"s1"})
    )
    empty, empty_errors = plan_parse({"steps": []}, max_steps=3, allowed_tools=ALLOWED, allow_empty=True)

    assert errors == [] and spec is not None and spec.steps[0].depends_on == ("s1",)
    assert empty_errors == [] and empty is not None and empty.steps == ()


def test_the_json_object_is_found_inside_prose_and_code_fences() -> None:
    assert json_object_in('Here:\n```json\n{"route": "tool"}\n```') == {"route": "tool"}
    assert json_object_in("no json here") is None
    assert json_object_in("{not json}") is None

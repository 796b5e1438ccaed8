from datetime import UTC, datetime

import pytest

from agents.runtime import builtin_tools
from agents.runtime.builtin_tools import (
    BUILTIN_TOOLS,
    CALCULATOR_SPEC,
    CURRENT_TIME_SPEC,
    StaticToolProvider,
    ToolInputError,
    calculator,
    current_time,
)
from agents.runtime.types import ToolCallRequested, ToolOutcome


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("12*7", "84"),
        ("(3+4)/2", "3.5"),
        ("2 + 2", "4"),
        ("7 // 2", "3"),
        ("7 % 3", "1"),
        ("2**10", "1024"),
        ("2**-2", "0.25"),
        ("-2**2", "-4"),
        ("+-3", "-3"),
        ("0.1 + 0.2", "0.3"),
        ("1/3", "0.333333333333333"),
        ("sqrt(16)", "4"),
        ("abs(-5.5)", "5.5"),
        ("round(2.567, 2)", "2.57"),
        ("round(2.5)", "2"),
        ("min(3, 1, 2) + max(4, 9)", "10"),
        ("log(8, 2)", "3"),
        ("log10(1000)", "3"),
        ("floor(2.7) + ceil(2.1)", "5"),
        ("sin(0) + cos(0)", "1"),
        ("pi", "3.14159265358979"),
        ("2 * e", "5.43656365691809"),
        ("10**300", "1" + "0" * 300),
        ("  1 +\n 1 ", "2"),
    ],
)
def test_calculator_evaluates_arithmetic(expression: str, expected: str) -> None:
    assert calculator(expression) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (
            "__import__('os')",
            "unknown function '__import__'; known functions: sqrt, abs, round, min, max, log, log10, "
            "exp, sin, cos, tan, floor, ceil",
        ),
        ("2**99999999", "result is too large (limit 1e+300)"),
        ("10**301", "result is too large (limit 1e+300)"),
        ("0.5**-2000", "result is too large (limit 1e+300)"),
        ("exp(1000)", "result is too large (limit 1e+300)"),
        ("1e308 * 10", "result is too large (limit 1e+300)"),
        ("x + 1", "unknown name 'x'; known constants: pi, e, tau"),
        ("os", "unknown name 'os'; known constants: pi, e, tau"),
        ("(1).real", "attribute access is not allowed"),
        ("pi.__class__", "attribute access is not allowed"),
        ("lambda: 1", "unsupported syntax: Lambda"),
        (
            "(lambda: 1)()",
            "only these functions can be called, by name: sqrt, abs, round, min, max, log, log10, "
            "exp, sin, cos, tan, floor, ceil",
        ),
        ("[1, 2]", "unsupported syntax: List"),
        ("1 if 1 else 2", "unsupported syntax: IfExp"),
        ("1 < 2", "unsupported syntax: Compare"),
        ("'a' * 3", "only real numbers are allowed, not str"),
        ("1j", "only real numbers are allowed, not complex"),
        ("True + 1", "booleans are not numbers here"),
        ("(-8) ** (1/3)", "result is not a real number"),
        ("2 ^ 3", "operator ^ is not supported; use ** for powers"),
        ("1 / 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("sqrt(-1)", "sqrt(): math domain error"),
        ("min()", "min(): min expected at least 1 argument, got 0"),
        ("abs(x=1)", "keyword arguments are not supported"),
        ("sqrt(*[16])", "unsupported syntax: Starred"),
        ("round(5, 10**9)", "round() takes a whole number of digits between -100 and 100"),
        ("1 +", "invalid expression: invalid syntax"),
        ("", "expression is empty"),
        ("1+" * 128 + "1", "expression is longer than 256 characters"),
    ],
)
def test_calculator_rejects_unsafe_or_invalid_input(expression: str, message: str) -> None:
    with pytest.raises(ToolInputError) as raised:
        calculator(expression)
    assert str(raised.value) == message


def test_current_time_defaults_to_utc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(builtin_tools, "_utc_now", lambda: datetime(2026, 1, 5, 13, 4, 5, 123456, tzinfo=UTC))

    assert current_time() == "2026-01-05T13:04:05+00:00 (Monday 5 January 2026, 13:04:05 UTC)"


@pytest.mark.parametrize(
    ("zone", "expected"),
    [
        ("Europe/Paris", "2026-01-05T14:04:05+01:00 (Monday 5 January 2026, 14:04:05 CET)"),
        ("Asia/Kolkata", "2026-01-05T18:34:05+05:30 (Monday 5 January 2026, 18:34:05 IST)"),
        ("America/New_York", "2026-01-05T08:04:05-05:00 (Monday 5 January 2026, 08:04:05 EST)"),
    ],
)
def test_current_time_in_an_iana_zone(monkeypatch: pytest.MonkeyPatch, zone: str, expected: str) -> None:
    monkeypatch.setattr(builtin_tools, "_utc_now", lambda: datetime(2026, 1, 5, 13, 4, 5, tzinfo=UTC))

    assert current_time(zone) == expected


@pytest.mark.parametrize("zone", ["Mars/Olympus", "../../etc/passwd", "/etc/localtime", "utc "])
def test_current_time_rejects_unknown_zones(zone: str) -> None:
    with pytest.raises(ToolInputError) as raised:
        current_time(zone)
    assert str(raised.value) == f"unknown time zone {zone!r}; use an IANA name such as 'Europe/Paris'"


def test_tool_specs_forbid_extra_arguments() -> None:
    assert CALCULATOR_SPEC.input_schema["required"] == ["expression"]
    assert CALCULATOR_SPEC.input_schema["additionalProperties"] is False
    assert CURRENT_TIME_SPEC.input_schema["additionalProperties"] is False
    assert "required" not in CURRENT_TIME_SPEC.input_schema


def test_static_tool_provider_serves_specs_timeouts_and_calls() -> None:
    provider = StaticToolProvider(BUILTIN_TOOLS)
    call = ToolCallRequested(id="call-1", name="calculator", arguments={"expression": "6*7"})

    assert provider.specs() == [CALCULATOR_SPEC, CURRENT_TIME_SPEC]
    assert (provider.timeout_for("calculator"), provider.timeout_for("missing")) == (5.0, 10.0)
    assert provider.execute(call, should_stop=lambda: False) == ToolOutcome(content="42")


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("teleport", {}, "unknown tool 'teleport'"),
        ("calculator", {}, "invalid arguments for calculator: missing a required argument: 'expression'"),
        ("calculator", {"expression": "1", "now": "x"}, "unexpected arguments for calculator: now"),
        ("current_time", ["UTC"], "arguments of current_time must be an object"),
    ],
)
def test_static_tool_provider_rejects_bad_calls(name: str, arguments: object, message: str) -> None:
    call = ToolCallRequested(id="call-1", name=name, arguments=arguments)  # type: ignore[arg-type]

    with pytest.raises(ToolInputError) as raised:
        StaticToolProvider(BUILTIN_TOOLS).execute(call, should_stop=lambda: False)
    assert str(raised.value) == message

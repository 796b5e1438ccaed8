"""Built-in tools as plain Python: a safe calculator and the current time.

``StaticToolProvider`` serves any such functions through the ``ToolProvider`` protocol; the
Django side wraps it with its tool policy.
"""

from __future__ import annotations

import ast
import inspect
import math
import operator
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agents.runtime.types import ToolCallRequested, ToolOutcome, ToolSpec


class ToolInputError(ValueError):
    """The arguments of a tool call cannot be used. The message is shown to the model."""


# --- calculator ---------------------------------------------------------------------------

MAX_EXPRESSION_LENGTH = 256
# Results beyond this are refused: big enough for any everyday sum, small enough that no
# intermediate integer costs noticeable time or memory.
MAX_MAGNITUDE = 1e300

Number = int | float

_BINARY_OPERATORS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_UNARY_OPERATORS: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}


def _round(value: Number, digits: int = 0) -> Number:
    if not isinstance(digits, int) or abs(digits) > 100:
        raise ToolInputError("round() takes a whole number of digits between -100 and 100")
    return round(value, digits) if digits else round(value)


_FUNCTIONS: dict[str, Callable[..., Number]] = {
    "sqrt": math.sqrt,
    "abs": abs,
    "round": _round,
    "min": min,
    "max": max,
    "log": math.log,
    "log10": math.log10,
    "exp": math.exp,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "floor": math.floor,
    "ceil": math.ceil,
}


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression by walking its syntax tree (never ``eval``)."""
    return _format_number(_evaluate(_parse(expression).body))


def _parse(expression: str) -> ast.Expression:
    if not isinstance(expression, str):
        raise ToolInputError("expression must be a string")
    source = " ".join(expression.split())  # a newline would end the expression
    if not source:
        raise ToolInputError("expression is empty")
    if len(source) > MAX_EXPRESSION_LENGTH:
        raise ToolInputError(f"expression is longer than {MAX_EXPRESSION_LENGTH} characters")
    try:
        return ast.parse(source, mode="eval")
    except (SyntaxError, ValueError) as error:
        raise ToolInputError(f"invalid expression: {getattr(error, 'msg', error)}") from None


def _evaluate(node: ast.expr) -> Number:
    match node:
        case ast.Constant(value=bool()):
            raise ToolInputError("booleans are not numbers here")
        case ast.Constant(value=int() | float() as value):
            return _checked(value)
        case ast.Constant(value=value):
            raise ToolInputError(f"only real numbers are allowed, not {type(value).__name__}")
        case ast.BinOp(left=left, op=ast.Pow(), right=right):
            return _checked(_power(_evaluate(left), _evaluate(right)))
        case ast.BinOp(left=left, op=op, right=right) if type(op) in _BINARY_OPERATORS:
            return _checked(_apply(_BINARY_OPERATORS[type(op)], _evaluate(left), _evaluate(right)))
        case ast.BinOp(op=ast.BitXor()):
            raise ToolInputError("operator ^ is not supported; use ** for powers")
        case ast.UnaryOp(op=op, operand=operand) if type(op) in _UNARY_OPERATORS:
            return _UNARY_OPERATORS[type(op)](_evaluate(operand))
        case ast.Name(id=name):
            if name not in _CONSTANTS:
                raise ToolInputError(f"unknown name {name!r}; known constants: {', '.join(_CONSTANTS)}")
            return _CONSTANTS[name]
        case ast.Call(func=ast.Name(id=name), args=args, keywords=[]):
            function = _function(name)
            return _checked(_call(name, function, [_evaluate(argument) for argument in args]))
        case ast.Call(func=ast.Name(), keywords=[_, *_]):
            raise ToolInputError("keyword arguments are not supported")
        case ast.Call():
            raise ToolInputError(f"only these functions can be called, by name: {', '.join(_FUNCTIONS)}")
        case ast.Attribute():
            raise ToolInputError("attribute access is not allowed")
        case _:
            raise ToolInputError(f"unsupported syntax: {type(node).__name__}")


def _apply(function: Callable[..., Any], *arguments: Number) -> Any:
    try:
        return function(*arguments)
    except ZeroDivisionError:
        raise ToolInputError("division by zero") from None
    except OverflowError:
        raise ToolInputError(f"result is too large (limit {MAX_MAGNITUDE:g})") from None


def _power(base: Number, exponent: Number) -> Any:
    # Estimate the result's size before computing it: 2**99999999 would take minutes and gigabytes.
    if base != 0 and exponent * math.log10(abs(base)) > math.log10(MAX_MAGNITUDE):
        raise ToolInputError(f"result is too large (limit {MAX_MAGNITUDE:g})")
    return _apply(operator.pow, base, exponent)


def _function(name: str) -> Callable[..., Number]:
    if name not in _FUNCTIONS:
        raise ToolInputError(f"unknown function {name!r}; known functions: {', '.join(_FUNCTIONS)}")
    return _FUNCTIONS[name]


def _call(name: str, function: Callable[..., Number], arguments: list[Number]) -> Any:
    try:
        return _apply(function, *arguments)
    except ToolInputError:
        raise
    except (TypeError, ValueError) as error:
        raise ToolInputError(f"{name}(): {error}") from None


def _checked(value: Any) -> Number:
    if isinstance(value, complex):
        raise ToolInputError("result is not a real number")
    if (isinstance(value, float) and not math.isfinite(value)) or abs(value) > MAX_MAGNITUDE:
        raise ToolInputError(f"result is too large (limit {MAX_MAGNITUDE:g})")
    return value


def _format_number(value: Number) -> str:
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.15g}"
    return str(value)


# --- current time -------------------------------------------------------------------------


def _utc_now() -> datetime:
    return datetime.now(UTC)


def current_time(timezone: str | None = None) -> str:
    """The current time as ISO 8601 plus a readable form, in an IANA zone (UTC by default)."""
    zone = _zone(timezone)
    now = _utc_now().astimezone(zone)
    readable = f"{now:%A} {now.day} {now:%B %Y, %H:%M:%S} {now.tzname()}"
    return f"{now.isoformat(timespec='seconds')} ({readable})"


def _zone(name: str | None) -> ZoneInfo:
    if not name:
        return ZoneInfo("UTC")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ToolInputError(f"unknown time zone {name!r}; use an IANA name such as 'Europe/Paris'") from None


# --- specs and provider -------------------------------------------------------------------

CALCULATOR_SPEC = ToolSpec(
    name="calculator",
    description=(
        "Evaluate an arithmetic expression exactly. Supports numbers, + - * / // % **, parentheses, "
        f"the constants {', '.join(_CONSTANTS)} and the functions {', '.join(_FUNCTIONS)}."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "expression": {
                "type": "string",
                "description": "The expression, for example '(3 + 4) / 2' or 'sqrt(16) * pi'.",
                "maxLength": MAX_EXPRESSION_LENGTH,
            },
        },
        "required": ["expression"],
        "additionalProperties": False,
    },
)

CURRENT_TIME_SPEC = ToolSpec(
    name="current_time",
    description="The current date and time, in ISO 8601 and in words.",
    input_schema={
        "type": "object",
        "properties": {
            "timezone": {
                "type": "string",
                "description": "An IANA time zone such as 'Europe/Paris'. UTC when omitted.",
            },
        },
        "additionalProperties": False,
    },
)

DEFAULT_TOOL_TIMEOUT_SECONDS = 10.0

ToolEntry = tuple[ToolSpec, Callable[..., str], float]

BUILTIN_TOOLS: dict[str, ToolEntry] = {
    "calculator": (CALCULATOR_SPEC, calculator, 5.0),
    "current_time": (CURRENT_TIME_SPEC, current_time, 5.0),
}


class StaticToolProvider:
    """A ``ToolProvider`` over plain functions: ``{name: (spec, function, timeout_seconds)}``.

    Arguments are passed as keywords; a function returns the text the model sees. Only the
    tools named in ``read_only`` count as changing nothing.
    """

    def __init__(self, tools: dict[str, ToolEntry], *, read_only: frozenset[str] = frozenset()) -> None:
        self._tools = dict(tools)
        self._read_only = read_only

    def specs(self) -> list[ToolSpec]:
        return [spec for spec, _function, _timeout in self._tools.values()]

    def timeout_for(self, name: str) -> float:
        # An unknown tool still gets a timeout: ``execute`` fails it at once.
        entry = self._tools.get(name)
        return entry[2] if entry else DEFAULT_TOOL_TIMEOUT_SECONDS

    def is_read_only(self, name: str) -> bool:
        return name in self._read_only and name in self._tools

    def execute(self, call: ToolCallRequested, *, should_stop: Callable[[], bool]) -> ToolOutcome:
        entry = self._tools.get(call.name)
        if entry is None:
            raise ToolInputError(f"unknown tool {call.name!r}")
        spec, function, _timeout = entry
        _check_arguments(spec, function, call.arguments)
        return ToolOutcome(content=function(**call.arguments))


def _check_arguments(spec: ToolSpec, function: Callable[..., str], arguments: Any) -> None:
    if not isinstance(arguments, dict):
        raise ToolInputError(f"arguments of {spec.name} must be an object")
    known = spec.input_schema.get("properties", {})
    unexpected = sorted(set(arguments) - set(known))
    if unexpected and spec.input_schema.get("additionalProperties") is False:
        raise ToolInputError(f"unexpected arguments for {spec.name}: {', '.join(unexpected)}")
    try:
        inspect.signature(function).bind(**arguments)
    except TypeError as error:
        raise ToolInputError(f"invalid arguments for {spec.name}: {error}") from None

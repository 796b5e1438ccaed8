"""The ``time`` and ``math`` groups: the runtime's pure ``current_time`` and ``calculator``."""

from typing import Any

from agents.runtime.builtin_tools import (
    CALCULATOR_SPEC,
    CURRENT_TIME_SPEC,
    ToolInputError,
    calculator,
    current_time,
)
from tools.builtins.base import BuiltinTool, ToolContext, ToolError, register


def run_current_time(arguments: dict[str, Any], context: ToolContext) -> str:
    try:
        return current_time(arguments.get("timezone"))
    except ToolInputError as error:
        raise ToolError(str(error)) from None


def run_calculator(arguments: dict[str, Any], context: ToolContext) -> str:
    try:
        return calculator(arguments["expression"])
    except ToolInputError as error:
        raise ToolError(str(error)) from None


register(
    BuiltinTool(
        name=CURRENT_TIME_SPEC.name,
        group="time",
        description=CURRENT_TIME_SPEC.description,
        input_schema=CURRENT_TIME_SPEC.input_schema,
        run=run_current_time,
        is_read_only=True,
        timeout_seconds=5.0,
    )
)
register(
    BuiltinTool(
        name=CALCULATOR_SPEC.name,
        group="math",
        description=CALCULATOR_SPEC.description,
        input_schema=CALCULATOR_SPEC.input_schema,
        run=run_calculator,
        is_read_only=True,
        timeout_seconds=5.0,
    )
)

"""``spawn_subagent`` (group ``sessions``): delegate one task to a read-only sub-agent.

The call itself never waits here: the run's tool gate starts the sub-agent and pauses the run
(sessions.subagents). When the run resumes after the sub-agent ended, this function only reads
the sub-agent's answer, which the model receives as the call's result.
"""

from typing import Any

from sessions.subagents import SPAWN_SUBAGENT, SubagentUnavailable, subagent_answer
from tools.builtins.base import BuiltinTool, ToolContext, ToolError, register

MAX_TASK_CHARACTERS = 20_000


def run_spawn_subagent(arguments: dict[str, Any], context: ToolContext) -> str:
    try:
        return subagent_answer(parent_run_id=context.run_id, tool_call_id=context.tool_call_id)
    except SubagentUnavailable as error:
        raise ToolError(str(error)) from None


register(
    BuiltinTool(
        name=SPAWN_SUBAGENT,
        group="sessions",
        description=(
            "Delegate one self-contained task to a sub-agent and get its final answer. The sub-agent "
            "uses the same model with read-only tools only, sees only the task you write (not this "
            "conversation), and cannot start other sub-agents. Several calls in one turn run in parallel."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "task": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_TASK_CHARACTERS,
                    "description": "The task, with every detail the sub-agent needs.",
                },
                "expected_output": {
                    "type": "string",
                    "maxLength": 2000,
                    "description": "What the answer should contain or look like.",
                },
            },
            "required": ["task"],
            "additionalProperties": False,
        },
        run=run_spawn_subagent,
        timeout_seconds=10.0,
        starts_runs=True,
    )
)

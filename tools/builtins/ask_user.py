"""``ask_user`` (group ``user``): the agent asks the user a question and waits for the answer.

The call never waits here: the run's tool gate asks the question and pauses the run
(sessions.questions). When the run resumes after the user answered (or the question expired),
this function only reads the answer, which the model receives as the call's result.
"""

from typing import Any

from sessions.questions import ASK_USER, QuestionUnanswered, question_answer_for_call
from tools.builtins.base import BuiltinTool, ToolContext, ToolError, register

MAX_QUESTION_CHARACTERS = 2000
MAX_CHOICES = 10
MAX_CHOICE_CHARACTERS = 200


def run_ask_user(arguments: dict[str, Any], context: ToolContext) -> str:
    try:
        return question_answer_for_call(run_id=context.run_id, tool_call_id=context.tool_call_id)
    except QuestionUnanswered as error:
        raise ToolError(str(error)) from None


register(
    BuiltinTool(
        name=ASK_USER,
        group="user",
        description=(
            "Ask the user a question and wait for their answer, which is this call's result. Use it "
            "when you cannot go on without a decision or a detail only the user has. With choices, "
            "the user picks exactly one of them."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "question": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_QUESTION_CHARACTERS,
                    "pattern": r"\S",
                    "description": "The question, complete enough to answer without context.",
                },
                "choices": {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1, "maxLength": MAX_CHOICE_CHARACTERS},
                    "maxItems": MAX_CHOICES,
                    "uniqueItems": True,
                    "description": "The answers the user may pick from; leave out for a free-text answer.",
                },
            },
            "required": ["question"],
            "additionalProperties": False,
        },
        run=run_ask_user,
        is_read_only=True,
        timeout_seconds=10.0,
        asks_user=True,
    )
)

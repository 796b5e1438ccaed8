"""Context compaction: when a conversation outgrows the model's window, older turns become a summary.

Before a model call whose request passes ``threshold`` times the context window, or after the provider
answered that the context is too long, the older messages are summarized by the same model (no
tools) into one user-role note placed first; the newest messages stay verbatim. The system prompt
is not part of the messages and always stays. The cut only falls where no tool call is open, so a
tool call always travels with its result. Before summarizing, a memory flush gives the agent one
turn with only ``memory_save`` to keep what it must not lose. When no summary can be written, the
oldest whole turns are dropped instead and the compaction says so (``is_fallback``).
"""

from agents.runtime.compaction.compactor import (
    MEMORY_FLUSH_INSTRUCTION,
    MEMORY_SAVE_TOOL,
    SUMMARY_SYSTEM_PROMPT,
    Compaction,
    CompactionPolicy,
    ContextCompactor,
)
from agents.runtime.compaction.context import (
    DROPPED_NOTE,
    SUMMARY_HEADER,
    choose_cut,
    compaction_note,
    cut_points,
    is_note_only,
    render_transcript,
    with_note,
)

__all__ = [
    "DROPPED_NOTE",
    "MEMORY_FLUSH_INSTRUCTION",
    "MEMORY_SAVE_TOOL",
    "SUMMARY_HEADER",
    "SUMMARY_SYSTEM_PROMPT",
    "Compaction",
    "CompactionPolicy",
    "ContextCompactor",
    "choose_cut",
    "compaction_note",
    "cut_points",
    "is_note_only",
    "render_transcript",
    "with_note",
]

"""The tool policy as a pure function: which tools an agent's run may call, and why not.

Rules, in order: a disabled tool is off; an owner-only tool needs an owner's run; built-in
tools must belong to a group of the policy's profile, tenant tools must be assigned to
the agent; a ``deny`` entry always wins; a non-empty ``allow`` list admits only what it
matches. Entries are tool names, ``group:<name>`` and ``*`` wildcards (fnmatch).
"""

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

# ``knowledge`` (file_search) is in every profile: it is only offered to runs of an agent with a
# knowledge base or of a session with attachments, which people chose to give it. ``user``
# (ask_user) is too: asking the person in the chat is part of any conversation.
PROFILE_GROUPS: dict[str, frozenset[str] | None] = {
    "minimal": frozenset({"time", "math", "memory", "knowledge", "user"}),
    "messaging": frozenset({"time", "math", "memory", "sessions", "knowledge", "user"}),
    "coding": frozenset({"time", "math", "memory", "sessions", "files", "web", "knowledge", "code", "user"}),
    "full": None,  # every built-in group
}


@dataclass(frozen=True)
class ToolFacts:
    """What the policy needs to know of a tool."""

    name: str
    group: str
    is_builtin: bool
    is_enabled: bool = True
    owner_only: bool = False
    requires_approval: bool = False
    is_read_only: bool = False


@dataclass(frozen=True)
class PolicyRules:
    profile: str = "minimal"
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    require_approval: tuple[str, ...] = ()
    editable_arguments: tuple[str, ...] = ()
    read_only_only: bool = False


@dataclass(frozen=True)
class Decision:
    is_allowed: bool
    reason: str
    requires_approval: bool = False
    # The approver may edit the call's arguments before approving (only with requires_approval).
    allows_argument_edits: bool = False


def entry_matches(entry: str, tool: ToolFacts) -> bool:
    if entry.startswith("group:"):
        return fnmatchcase(tool.group, entry.removeprefix("group:"))
    return fnmatchcase(tool.name, entry)


def first_match(entries: Iterable[str], tool: ToolFacts) -> str | None:
    return next((entry for entry in entries if entry_matches(entry, tool)), None)


def decide(tool: ToolFacts, rules: PolicyRules, *, is_assigned: bool, is_owner_run: bool) -> Decision:
    refusal = _refusal(tool, rules, is_assigned=is_assigned, is_owner_run=is_owner_run)
    if refusal:
        return Decision(is_allowed=False, reason=refusal)
    approval_entry = first_match(rules.require_approval, tool)
    needs_approval = tool.requires_approval or approval_entry is not None
    is_editable = needs_approval and first_match(rules.editable_arguments, tool) is not None
    return Decision(
        is_allowed=True, reason="allowed", requires_approval=needs_approval, allows_argument_edits=is_editable
    )


def _refusal(tool: ToolFacts, rules: PolicyRules, *, is_assigned: bool, is_owner_run: bool) -> str | None:
    if not tool.is_enabled:
        return f"tool {tool.name} is disabled"
    if tool.owner_only and not is_owner_run:
        return f"tool {tool.name} may only be used in runs of a tenant owner"
    if rules.read_only_only and not tool.is_read_only:
        return f"tool {tool.name} can change things; this run may only use read-only tools"
    groups = PROFILE_GROUPS.get(rules.profile)
    if tool.is_builtin and groups is not None and tool.group not in groups:
        return f"tool {tool.name} (group {tool.group}) is not in the {rules.profile} profile"
    if not tool.is_builtin and not is_assigned:
        return f"tool {tool.name} is not assigned to this agent"
    denied_by = first_match(rules.deny, tool)
    if denied_by is not None:
        return f"tool {tool.name} is denied by the policy entry {denied_by!r}"
    if rules.allow and first_match(rules.allow, tool) is None:
        return f"tool {tool.name} is not in the policy's allow list"
    return None

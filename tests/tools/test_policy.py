"""The tool policy matrix: profile x allow x deny x wildcard/group, owner-only, read-only runs."""

import pytest

from tools.policy import PolicyRules, ToolFacts, decide

CALCULATOR = ToolFacts(name="calculator", group="math", is_builtin=True, is_read_only=True)
FILE_WRITE = ToolFacts(name="file_write", group="files", is_builtin=True)
WEB_FETCH = ToolFacts(name="web_fetch", group="web", is_builtin=True, is_read_only=True)
CODE_RUN = ToolFacts(name="code_run", group="code", is_builtin=True)
SESSION_SEND = ToolFacts(name="session_send", group="sessions", is_builtin=True)
CRM_LOOKUP = ToolFacts(name="crm_lookup", group="http", is_builtin=False, is_read_only=True)
DEPLOY = ToolFacts(name="deploy", group="http", is_builtin=False, owner_only=True)


def verdict(
    tool: ToolFacts, rules: PolicyRules, *, is_assigned: bool = True, is_owner_run: bool = True
) -> tuple[bool, str]:
    decision = decide(tool, rules, is_assigned=is_assigned, is_owner_run=is_owner_run)
    return decision.is_allowed, decision.reason


@pytest.mark.parametrize(
    ("profile", "tool", "expected"),
    [
        ("minimal", CALCULATOR, True),
        ("minimal", SESSION_SEND, False),
        ("minimal", FILE_WRITE, False),
        ("messaging", SESSION_SEND, True),
        ("messaging", WEB_FETCH, False),
        ("coding", WEB_FETCH, True),
        ("coding", FILE_WRITE, True),
        ("full", FILE_WRITE, True),
        ("messaging", CODE_RUN, False),
        ("coding", CODE_RUN, True),
        ("full", CODE_RUN, True),
        ("minimal", CRM_LOOKUP, True),  # assigned tenant tools do not depend on the profile
    ],
)
def test_profiles_decide_which_builtin_groups_are_on(profile: str, tool: ToolFacts, expected: bool) -> None:
    assert verdict(tool, PolicyRules(profile=profile))[0] is expected


def test_profile_refusal_says_why() -> None:
    assert verdict(FILE_WRITE, PolicyRules(profile="minimal")) == (
        False,
        "tool file_write (group files) is not in the minimal profile",
    )


def test_unassigned_tenant_tool_is_refused() -> None:
    assert verdict(CRM_LOOKUP, PolicyRules(profile="full"), is_assigned=False) == (
        False,
        "tool crm_lookup is not assigned to this agent",
    )


@pytest.mark.parametrize(
    ("allow", "deny", "tool", "expected_reason"),
    [
        ((), ("calculator",), CALCULATOR, "tool calculator is denied by the policy entry 'calculator'"),
        ((), ("group:math",), CALCULATOR, "tool calculator is denied by the policy entry 'group:math'"),
        ((), ("calc*",), CALCULATOR, "tool calculator is denied by the policy entry 'calc*'"),
        ((), ("*",), CALCULATOR, "tool calculator is denied by the policy entry '*'"),
        (
            ("calculator",),
            ("calculator",),
            CALCULATOR,
            "tool calculator is denied by the policy entry 'calculator'",
        ),
        (("*",), ("group:web",), WEB_FETCH, "tool web_fetch is denied by the policy entry 'group:web'"),
        (("web_*",), (), CALCULATOR, "tool calculator is not in the policy's allow list"),
        (("group:web",), (), CALCULATOR, "tool calculator is not in the policy's allow list"),
        (("group:math",), (), CALCULATOR, "allowed"),
        (("*",), (), FILE_WRITE, "allowed"),
        (("crm_*",), ("group:web",), CRM_LOOKUP, "allowed"),
        (("group:m*",), (), CALCULATOR, "allowed"),
    ],
)
def test_allow_and_deny_with_wildcards_and_groups(
    allow: tuple[str, ...], deny: tuple[str, ...], tool: ToolFacts, expected_reason: str
) -> None:
    is_allowed, reason = verdict(tool, PolicyRules(profile="full", allow=allow, deny=deny))

    assert reason == expected_reason
    assert is_allowed is (expected_reason == "allowed")


def test_owner_only_tool_is_refused_in_a_members_run() -> None:
    assert verdict(DEPLOY, PolicyRules(profile="full"), is_owner_run=False) == (
        False,
        "tool deploy may only be used in runs of a tenant owner",
    )
    assert verdict(DEPLOY, PolicyRules(profile="full"), is_owner_run=True) == (True, "allowed")


def test_read_only_runs_get_only_read_only_tools() -> None:
    rules = PolicyRules(profile="full", read_only_only=True)

    assert verdict(WEB_FETCH, rules) == (True, "allowed")
    assert verdict(FILE_WRITE, rules) == (
        False,
        "tool file_write can change things; this run may only use read-only tools",
    )


def test_disabled_tool_is_refused() -> None:
    disabled = ToolFacts(name="calculator", group="math", is_builtin=True, is_enabled=False)

    assert verdict(disabled, PolicyRules()) == (False, "tool calculator is disabled")


@pytest.mark.parametrize(
    ("tool", "entries", "expected"),
    [
        (CALCULATOR, (), False),
        (CALCULATOR, ("calculator",), True),
        (CALCULATOR, ("group:math",), True),
        (WEB_FETCH, ("group:math",), False),
        (ToolFacts(name="x", group="math", is_builtin=True, requires_approval=True), (), True),
    ],
)
def test_approval_comes_from_the_tool_flag_or_the_policy(
    tool: ToolFacts, entries: tuple[str, ...], expected: bool
) -> None:
    decision = decide(
        tool, PolicyRules(profile="full", require_approval=entries), is_assigned=True, is_owner_run=True
    )

    assert decision.requires_approval is expected

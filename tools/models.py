"""Tools, their assignment to agents, and each agent's tool policy."""

import uuid

from django.db import models

from agents.models import Agent
from core.fields import EncryptedJSONField
from tenants.models import Tenant

TOOL_NAME_REGEX = r"^[a-zA-Z0-9_-]{1,64}$"


class ToolKind(models.TextChoices):
    BUILTIN = "builtin", "Built-in"
    HTTP = "http", "HTTP"
    MCP = "mcp", "MCP"


class Tool(models.Model):
    """A tool a model can call. Built-ins have no tenant and are read-only.

    MCP tools are discovered from their server (``mcp_server``) and exposed to the model
    as ``<server>__<tool>``; HTTP tools call a URL template with encrypted headers.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, null=True, blank=True, related_name="tools")
    name = models.CharField(max_length=64)
    description = models.TextField(max_length=4000, blank=True)
    kind = models.CharField(max_length=10, choices=ToolKind.choices)
    group = models.CharField(max_length=64, blank=True)
    input_schema = models.JSONField(default=dict)
    is_read_only = models.BooleanField(default=False)
    requires_approval = models.BooleanField(default=False)
    owner_only = models.BooleanField(default=False)
    timeout_seconds = models.FloatField(default=30.0)
    is_enabled = models.BooleanField(default=True)
    # HTTP tools
    http_method = models.CharField(max_length=10, blank=True)
    url_template = models.CharField(max_length=2000, blank=True)
    headers = models.JSONField(default=dict, blank=True)
    secret_headers = EncryptedJSONField(blank=True, default=dict)
    # MCP tools
    mcp_server = models.ForeignKey(
        "mcp_servers.McpServer", on_delete=models.CASCADE, null=True, blank=True, related_name="tools"
    )
    mcp_tool_name = models.CharField(max_length=200, blank=True)
    annotations = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["group", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="tool_unique_name_per_tenant"),
            models.UniqueConstraint(
                fields=["name"], condition=models.Q(tenant__isnull=True), name="tool_unique_builtin_name"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class AgentTool(models.Model):
    """A tenant tool (HTTP or MCP) assigned to an agent. Built-ins come with the profile."""

    id = models.BigAutoField(primary_key=True)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="tool_assignments")
    tool = models.ForeignKey(Tool, on_delete=models.CASCADE, related_name="assignments")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "tool"], name="agenttool_unique")]

    def __str__(self) -> str:
        return f"{self.tool} for {self.agent}"


class ToolProfile(models.TextChoices):
    MINIMAL = "minimal", "Minimal: time, math, memory"
    MESSAGING = "messaging", "Messaging: + sessions"
    CODING = "coding", "Coding: + files, web"
    FULL = "full", "Full: everything assigned"


def empty_list() -> list[str]:
    return []


class ToolPolicy(models.Model):
    """Which of its tools an agent may call, how often, and which need approval."""

    agent = models.OneToOneField(
        Agent, on_delete=models.CASCADE, primary_key=True, related_name="tool_policy"
    )
    profile = models.CharField(max_length=20, choices=ToolProfile.choices, default=ToolProfile.MINIMAL)
    # Entries: tool names, "group:<name>", and "*" wildcards. Deny wins over allow.
    allow = models.JSONField(default=empty_list, blank=True)
    deny = models.JSONField(default=empty_list, blank=True)
    max_calls_per_turn = models.PositiveIntegerField(default=8)
    max_calls_per_run = models.PositiveIntegerField(default=50)
    # Tool names (or groups/wildcards) whose calls wait for a person's approval.
    require_approval = models.JSONField(default=empty_list, blank=True)
    # Tool names (or groups/wildcards) whose arguments the approver may edit before approving.
    editable_arguments = models.JSONField(default=empty_list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"policy of {self.agent}"


class WorkspaceFile(models.Model):
    """A file in an agent's workspace, stored in the database (no host filesystem access)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="workspace_files")
    path = models.CharField(max_length=500)
    content = models.TextField(blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["path"]
        constraints = [models.UniqueConstraint(fields=["agent", "path"], name="workspacefile_unique_path")]

    def __str__(self) -> str:
        return self.path

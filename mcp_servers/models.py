"""MCP servers a tenant connects: transport, encrypted credentials, health, discovered tools."""

import uuid

from django.db import models

from core.fields import EncryptedJSONField, EncryptedTextField
from tenants.models import Tenant


class McpTransport(models.TextChoices):
    STREAMABLE_HTTP = "streamable_http", "Streamable HTTP"
    SSE = "sse", "SSE"
    STDIO = "stdio", "stdio (local command)"


class McpHealth(models.TextChoices):
    UNKNOWN = "unknown"
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    DOWN = "down"


class McpServer(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="mcp_servers")
    # Tools appear to models as "<name>__<tool>", so the name follows tool-name rules.
    name = models.CharField(max_length=40)
    transport = models.CharField(max_length=20, choices=McpTransport.choices)
    url = models.CharField(max_length=2000, blank=True)
    # Credentials: encrypted at rest, write-only in the API.
    token = EncryptedTextField(blank=True, default="")
    headers = EncryptedJSONField(blank=True, default=dict)
    command = models.CharField(max_length=500, blank=True)
    args = models.JSONField(default=list, blank=True)
    env = EncryptedJSONField(blank=True, default=dict)
    connect_timeout_seconds = models.FloatField(default=10.0)
    call_timeout_seconds = models.FloatField(default=60.0)
    is_enabled = models.BooleanField(default=True)
    health_status = models.CharField(max_length=10, choices=McpHealth.choices, default=McpHealth.UNKNOWN)
    last_checked_at = models.DateTimeField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "MCP server"
        verbose_name_plural = "MCP servers"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="mcpserver_unique_name_per_tenant")
        ]

    def __str__(self) -> str:
        return self.name

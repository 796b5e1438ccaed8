from django.apps import AppConfig


class McpServersConfig(AppConfig):
    name = "mcp_servers"
    verbose_name = "MCP servers"

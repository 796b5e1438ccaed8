from django.contrib.admin.apps import AdminConfig


class AgentryAdminConfig(AdminConfig):
    """Django's admin with Agentry's role-aware site."""

    default_site = "core.admin.AgentryAdminSite"

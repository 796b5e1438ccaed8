from django.apps import AppConfig


class AgentSessionsConfig(AppConfig):
    name = "sessions"
    # "sessions" is django.contrib.sessions' label.
    label = "agent_sessions"
    verbose_name = "Agent sessions"

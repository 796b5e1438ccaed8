from django.apps import AppConfig
from django.db.models.signals import post_delete


class ToolsConfig(AppConfig):
    name = "tools"

    def ready(self) -> None:
        from sessions.models import Session
        from tools.sandbox.signals import remove_workspace_after_commit

        # A receiver, not a call in session_delete: sessions also go with their agent or tenant.
        post_delete.connect(
            remove_workspace_after_commit, sender=Session, dispatch_uid="tools.sandbox_workspace"
        )

"""A deleted session takes its sandbox workspace with it."""

from typing import Any

from django.db import transaction

from sessions.models import Session
from tools.sandbox.workspaces import remove_session_workspace


def remove_workspace_after_commit(sender: type[Session], instance: Session, **kwargs: Any) -> None:
    tenant_id, session_id = instance.tenant_id, instance.pk
    # After the commit: a rolled-back delete keeps its files.
    transaction.on_commit(lambda: remove_session_workspace(tenant_id, session_id), using=kwargs.get("using"))

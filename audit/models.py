"""The audit log: who changed what, when and from where, per tenant. Append-only."""

import uuid

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils import timezone

from tenants.models import Tenant


class AuditSource(models.TextChoices):
    UI = "ui", "Web UI"
    API = "api", "API"
    ADMIN = "admin", "Admin"
    SYSTEM = "system", "System"


class AuditAction(models.TextChoices):
    CREATE = "create", "Create"
    UPDATE = "update", "Update"
    DELETE = "delete", "Delete"


class AuditEntry(models.Model):
    """One create, update or delete. ``changes`` maps each field to ``[old, new]``, secrets redacted."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # None: a change to the platform itself (the price table), shown to superusers in the admin.
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, null=True, blank=True, related_name="audit_entries"
    )
    created_at = models.DateTimeField(default=timezone.now)
    # The label outlives the user: a deleted account still reads as who it was.
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    actor_label = models.CharField(max_length=254)
    source = models.CharField(max_length=10, choices=AuditSource.choices)
    api_key_prefix = models.CharField(max_length=16, blank=True)
    remote_address = models.CharField(max_length=64, blank=True)
    action = models.CharField(max_length=10, choices=AuditAction.choices)
    object_type = models.CharField(max_length=40)
    object_id = models.CharField(max_length=64)
    object_label = models.CharField(max_length=200, blank=True)
    changes = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "audit entry"
        verbose_name_plural = "audit entries"
        indexes = [models.Index(fields=["tenant", "-created_at"], name="auditentry_tenant_created")]

    def __str__(self) -> str:
        return f"{self.actor_label} {self.action} {self.object_type} {self.object_label}"

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone

from core.fields import EncryptedTextField


class Role(models.TextChoices):
    VIEWER = "viewer", "Viewer"
    MEMBER = "member", "Member"
    ADMIN = "admin", "Admin"
    OWNER = "owner", "Owner"


# Each role can do everything the roles before it can.
ROLE_RANK = {Role.VIEWER: 0, Role.MEMBER: 1, Role.ADMIN: 2, Role.OWNER: 3}


def role_at_least(role: str, required: str) -> bool:
    return ROLE_RANK[Role(role)] >= ROLE_RANK[Role(required)]


def default_tenant_settings() -> dict[str, object]:
    return {}


class Tenant(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=200)
    # Limits and defaults (see tenants.limits for the keys and their defaults).
    settings = models.JSONField(default=default_tenant_settings, blank=True)
    # Set by billing's services once the tenant has credits or a budget, and never cleared: a run
    # of a tenant without either reads neither (billing.meter).
    is_metered = models.BooleanField(default=False, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Membership(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant", "user"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user"], name="membership_unique_user_per_tenant")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} ({self.role})"


class ApiKeyScope(models.TextChoices):
    READ = "read", "Read"
    WRITE = "write", "Read and write"


class ApiKey(models.Model):
    """A tenant API key. Only a SHA-256 digest of the secret is stored.

    The full key reads ``agt_<prefix>_<secret>``; the prefix identifies the row and is
    safe to show, the secret is shown once at creation.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=64)
    scope = models.CharField(max_length=5, choices=ApiKeyScope.choices, default=ApiKeyScope.WRITE)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="created_api_keys"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Not a column: the creator's role in the key's tenant, read with the key when it authenticates
    # (tenants.authentication); None before that, and once the creator is no longer a member.
    creator_role: str | None = None

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"
        verbose_name_plural = "API keys"

    def __str__(self) -> str:
        return f"{self.name} (agt_{self.prefix}_…)"

    @property
    def is_active(self) -> bool:
        now = timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)


class KeyProvider(models.TextChoices):
    ANTHROPIC = "anthropic", "Anthropic"
    OPENAI = "openai", "OpenAI-compatible"


class ProviderKey(models.Model):
    """A tenant's own model-provider key, used instead of the platform's. Encrypted at rest."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="provider_keys")
    provider = models.CharField(max_length=20, choices=KeyProvider.choices)
    api_key = EncryptedTextField()
    base_url = models.URLField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "provider"], name="providerkey_unique_per_tenant")
        ]

    def __str__(self) -> str:
        return f"{self.tenant} {self.provider} key"


class Invitation(models.Model):
    """An invitation to join a tenant, sent to an e-mail address. Only a SHA-256 digest of
    its token is stored; the token is shown once to the inviter and mailed to the invitee.

    It works once (``accepted_at``), until ``expires_at``, unless revoked. Whoever accepts
    it is the account with that e-mail: a new one sets its own password through the link,
    an existing one signs in first.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField()
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    token_hash = models.CharField(max_length=64, unique=True)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sent_invitations"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="accepted_invitations",
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["tenant", "email"], name="invitation_tenant_email")]

    def __str__(self) -> str:
        return f"{self.email} to {self.tenant} ({self.role})"

    @property
    def is_pending(self) -> bool:
        return self.accepted_at is None and self.revoked_at is None and self.expires_at > timezone.now()

"""Invitations: how a person joins a tenant. Adding a member by e-mail always invites.

An inviter never chooses anyone's password, and the answer to "add this e-mail" is the
same whether or not the address has an account: a link that works once, until it
expires. Whoever opens it sets a password if the address has no account yet, or signs in
to the account that has it; either way they join with the invited role.
"""

import logging
import secrets
import smtplib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.mail import BadHeaderError, send_mail
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.http import Http404
from django.utils import timezone

from audit.models import AuditAction
from audit.services import audit_record, audit_values
from tenants.actors import Actor
from tenants.api_keys import hash_secret
from tenants.email_addresses import email_address_clean
from tenants.models import Invitation, Membership, Role
from tenants.services import membership_record

logger = logging.getLogger(__name__)

# The token's digest is never part of an entry: it is what a link is checked against.
AUDITED_FIELDS = ("email", "role", "expires_at", "accepted_at", "accepted_by", "revoked_at")


@dataclass(frozen=True)
class CreatedInvitation:
    invitation: Invitation
    link: str


def _require_inviter(actor: Actor, *, role: str) -> None:
    if not actor.can(Role.ADMIN):
        raise PermissionDenied("Only admins and owners manage members.")
    if role == Role.OWNER and not actor.can(Role.OWNER):
        raise PermissionDenied("Only owners grant, change or remove the owner role.")


def invitation_create(
    *, actor: Actor, email: str, role: str, link_for: Callable[[str], str]
) -> CreatedInvitation:
    """Invite an e-mail address with a role; the link (``link_for(token)``) is returned once.

    A newer invitation replaces the address's pending one in this tenant. The e-mail goes
    out after the commit; a mail server that refuses it does not undo the invitation.
    """
    if role not in Role.values:
        raise ValidationError({"role": [f"Choose one of {', '.join(Role.values)}."]})
    _require_inviter(actor, role=role)
    email = email_address_clean(email)
    if Membership.objects.filter(tenant=actor.tenant, user__username=email).exists():
        raise ValidationError({"email": ["This person is already a member; change their role instead."]})
    token = secrets.token_urlsafe(32)
    now = timezone.now()
    with transaction.atomic():
        for replaced in _pending(Invitation.objects.filter(tenant=actor.tenant, email=email)):
            _revoke(replaced, now=now)
        invitation = Invitation.objects.create(
            tenant=actor.tenant,
            email=email,
            role=role,
            token_hash=hash_secret(token),
            invited_by=actor.user,
            expires_at=now + timedelta(hours=settings.INVITATION_TTL_HOURS),
        )
        _record(invitation, AuditAction.CREATE, before=None)
        link = link_for(token)
        transaction.on_commit(lambda: _send_invitation(invitation, link))
    return CreatedInvitation(invitation=invitation, link=link)


def _send_invitation(invitation: Invitation, link: str) -> None:
    tenant_name = " ".join(invitation.tenant.name.split())
    inviter = invitation.invited_by.email or invitation.invited_by.username
    body = (
        f"{inviter} invited you to join {tenant_name} on Agentry as {invitation.role}.\n\n"
        f"Accept the invitation: {link}\n\n"
        f"The link works once and expires at {invitation.expires_at:%Y-%m-%d %H:%M} UTC.\n"
        "If you did not expect it, ignore this e-mail.\n"
    )
    try:
        send_mail(f"Join {tenant_name} on Agentry", body, None, [invitation.email])
    except (smtplib.SMTPException, OSError, BadHeaderError):
        # The inviter has the link on screen; the log names the invitation, never its token.
        logger.warning("Could not e-mail invitation %s", invitation.pk, exc_info=True)


def _pending(invitations: QuerySet[Invitation]) -> QuerySet[Invitation]:
    return invitations.filter(
        accepted_at__isnull=True, revoked_at__isnull=True, expires_at__gt=timezone.now()
    )


def invitation_list_pending_for_actor(*, actor: Actor) -> QuerySet[Invitation]:
    return _pending(Invitation.objects.filter(tenant=actor.tenant)).select_related("invited_by")


def invitation_get_for_actor(*, actor: Actor, invitation_id: UUID | str) -> Invitation:
    try:
        return Invitation.objects.get(tenant=actor.tenant, pk=UUID(str(invitation_id)))
    except (Invitation.DoesNotExist, ValueError) as error:
        raise Http404("invitation not found") from error


def _record(invitation: Invitation, action: str, *, before: dict[str, Any] | None, user: Any = None) -> None:
    audit_record(
        tenant=invitation.tenant,
        action=action,
        object_type="invitation",
        object_id=invitation.pk,
        object_label=invitation.email,
        before=before,
        after=audit_values(invitation, AUDITED_FIELDS),
        user=user,
    )


def _revoke(invitation: Invitation, *, now: Any) -> None:
    """Revoke a pending invitation (once: a guarded update) and record it."""
    before = audit_values(invitation, AUDITED_FIELDS)
    invitation.revoked_at = now
    if Invitation.objects.filter(pk=invitation.pk, revoked_at__isnull=True).update(revoked_at=now):
        _record(invitation, AuditAction.UPDATE, before=before)


def invitation_revoke(*, actor: Actor, invitation: Invitation) -> Invitation:
    _require_inviter(actor, role=invitation.role)
    if invitation.accepted_at is not None:
        raise ValidationError("This invitation was already accepted; remove the member instead.")
    if invitation.revoked_at is None:
        with transaction.atomic():
            _revoke(invitation, now=timezone.now())
    return invitation


@dataclass(frozen=True)
class OpenedInvitation:
    """A pending invitation found by its token, and what accepting it takes."""

    invitation: Invitation
    has_account: bool


def invitation_open(*, token: str) -> OpenedInvitation:
    """The pending invitation of a token; the same 404 for unknown, used, revoked and expired."""
    invitation = (
        _pending(Invitation.objects.filter(token_hash=hash_secret(token))).select_related("tenant").first()
    )
    if invitation is None:
        raise Http404("This invitation link is not valid: it was used, revoked or has expired.")
    return OpenedInvitation(
        invitation=invitation, has_account=User.objects.filter(username=invitation.email).exists()
    )


def _claim(invitation: Invitation, user: User) -> Membership:
    """Mark the invitation used (once: a guarded update) and make ``user`` a member.

    The invitee acts here (they may not be signed in yet): the entries name them.
    """
    before = audit_values(invitation, AUDITED_FIELDS)
    invitation.accepted_at, invitation.accepted_by = timezone.now(), user
    claimed = _pending(Invitation.objects.filter(pk=invitation.pk)).update(
        accepted_at=invitation.accepted_at, accepted_by=user
    )
    if claimed != 1:
        raise Http404("This invitation link is not valid: it was used, revoked or has expired.")
    _record(invitation, AuditAction.UPDATE, before=before, user=user)
    # Someone who joined meanwhile keeps the role they have.
    membership, created = Membership.objects.get_or_create(
        tenant_id=invitation.tenant_id, user=user, defaults={"role": invitation.role}
    )
    if created:
        membership_record(membership, AuditAction.CREATE, before=None, user=user)
    return membership


def invitation_accept_with_new_account(*, invitation: Invitation, password: str) -> Membership:
    """Create the invitee's account with the password they chose, and join the tenant."""
    user = User(username=invitation.email, email=invitation.email)
    try:
        validate_password(password, user)
    except ValidationError as error:
        raise ValidationError({"new_password1": error.messages}) from error
    user.set_password(password)
    try:
        with transaction.atomic():
            user.save()
            return _claim(invitation, user)
    except IntegrityError as error:
        # The address got an account since the page was opened: its owner signs in instead.
        raise ValidationError(
            "An account with this e-mail exists now: sign in to it to accept the invitation."
        ) from error


@transaction.atomic
def invitation_accept_as_user(*, invitation: Invitation, user: User) -> Membership:
    """The signed-in account joins, if it is the invited address."""
    if user.username != invitation.email:
        raise PermissionDenied(
            f"This invitation is for {invitation.email}: sign out, then sign in as that account to accept it."
        )
    return _claim(invitation, user)

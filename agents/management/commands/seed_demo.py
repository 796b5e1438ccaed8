import os
from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction

from agents.models import Agent, ModelProvider
from tenants.models import Membership, Role, Tenant
from tenants.services import membership_set, user_get_or_create

DEMO_TENANT_SLUG = "demo"
DEMO_OWNER_EMAIL = "demo@agentry.local"
DEMO_OWNER_PASSWORD = "agentry-demo"  # noqa: S105 - a documented local demo login
DEMO_AGENT_NAME = "Demo assistant"


class Command(BaseCommand):
    help = "Create (or keep) the demo tenant, its owner login and an agent on the offline model."

    @transaction.atomic
    def handle(self, *args: Any, **options: Any) -> None:
        tenant, _ = Tenant.objects.get_or_create(slug=DEMO_TENANT_SLUG, defaults={"name": "Demo"})
        owner, is_new_user = user_get_or_create(email=DEMO_OWNER_EMAIL)
        if is_new_user:
            owner.set_password(DEMO_OWNER_PASSWORD)
            owner.save(update_fields=["password"])
        if not Membership.objects.filter(tenant=tenant, user=owner).exists():
            membership_set(tenant=tenant, user=owner, role=Role.OWNER)
        Agent.objects.get_or_create(
            tenant=tenant,
            name=DEMO_AGENT_NAME,
            defaults={
                "description": "Answers on the local offline demo model; asks tools for time and arithmetic.",
                "goal": "Show how Agentry runs an agent, step by step.",
                "system_prompt": "You are a helpful assistant. Use tools for arithmetic and the time.",
                "model_provider": ModelProvider.OFFLINE,
                "created_by": owner,
            },
        )
        # `make run` serves on HOST:PORT (manage.py serve), 127.0.0.1:8000 unless set.
        address = f"{os.environ.get('HOST', '127.0.0.1')}:{os.environ.get('PORT', '8000')}"
        self.stdout.write(
            f"Demo ready: sign in at http://{address}/ as {DEMO_OWNER_EMAIL} "
            f"with password {DEMO_OWNER_PASSWORD!r} (tenant '{DEMO_TENANT_SLUG}')."
        )

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.validators import validate_email, validate_slug

from tenants.models import Membership, Tenant
from tenants.services import api_key_create, tenant_create


class Command(BaseCommand):
    help = "Create a tenant with an owner. With --api-key, print a new key alone on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--owner", required=True, help="the owner's e-mail (created if new)")
        parser.add_argument("--name", help="display name (default: the slug)")
        parser.add_argument("--password", help="set the owner's password")
        parser.add_argument("--api-key", action="store_true", help="create an API key for the owner")

    def handle(self, *args: Any, **options: Any) -> None:
        slug = options["slug"]
        try:
            validate_slug(slug)
            validate_email(options["owner"])
        except ValidationError as error:
            raise CommandError("; ".join(error.messages)) from error
        if Tenant.objects.filter(slug=slug).exists():
            raise CommandError(f"a tenant with slug {slug!r} already exists")
        tenant = tenant_create(
            slug=slug,
            name=options["name"] or slug,
            owner_email=options["owner"],
            owner_password=options["password"],
        )
        owner = Membership.objects.get(tenant=tenant).user
        self.stdout.write(f"Created tenant {tenant.slug} ({tenant.pk}) owned by {owner.email}")
        if options["api_key"]:
            created = api_key_create(tenant=tenant, created_by=owner, name="created by create_tenant")
            self.stdout.write("API key (shown once):")
            self.stdout.write(created.plaintext)

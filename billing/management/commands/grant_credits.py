"""manage.py grant_credits <tenant-slug> <amount>: an operator adds credits to a workspace."""

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from billing.pricing import credits_text
from billing.selectors import credit_balance_micros
from billing.services import credits_grant, credits_refund, credits_to_micros
from tenants.models import Tenant


class Command(BaseCommand):
    help = "Grant credits to a workspace (or refund them with --refund), and print its balance."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tenant", help="the workspace's slug")
        parser.add_argument("amount", help="credits, e.g. 10 or 2.50")
        parser.add_argument("--note", default="", help="why, kept in the ledger")
        parser.add_argument("--refund", action="store_true", help="record a refund rather than a grant")
        parser.add_argument("--run", default=None, help="with --refund: the run the refund is for")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"No workspace has the slug {options['tenant']!r}.")
        try:
            amount = credits_to_micros(options["amount"])
            if options["refund"]:
                credits_refund(
                    tenant=tenant, amount_micros=amount, run_id=options["run"], note=options["note"]
                )
            else:
                credits_grant(
                    tenant=tenant, amount_micros=amount, note=options["note"] or "granted by an operator"
                )
        except ValidationError as error:
            raise CommandError("; ".join(error.messages)) from None
        self.stdout.write(f"{tenant.slug}: balance {credits_text(credit_balance_micros(tenant))} credits")

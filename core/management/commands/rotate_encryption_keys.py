"""Re-encrypt every stored secret under the newest key of FIELD_ENCRYPTION_KEYS.

Rotation: put the new key first (``FIELD_ENCRYPTION_KEYS=new,old``), deploy, run this
command, then drop the old key. Values already under the newest key are left alone, so
running it again changes nothing. Rows are read and written as raw column values (the
fields would decrypt on read and encrypt on write) and each write is conditional on the
ciphertext it replaces, so a secret changed meanwhile is never overwritten.
"""

from dataclasses import dataclass
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from django.apps import apps
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import Field, Model

from core import encryption
from core.fields import EncryptedJSONField, EncryptedTextField

ENCRYPTED_FIELD_TYPES = (EncryptedTextField, EncryptedJSONField)


@dataclass
class Counts:
    rotated: int = 0
    current: int = 0
    failed: int = 0


def encrypted_fields() -> list[tuple[type[Model], Field]]:
    """Every concrete encrypted column of every installed model."""
    found: list[tuple[type[Model], Field]] = []
    for model in apps.get_models():
        if model._meta.proxy or not model._meta.managed:
            continue
        for field in model._meta.concrete_fields:
            if isinstance(field, ENCRYPTED_FIELD_TYPES):
                found.append((model, field))
    return found


class Command(BaseCommand):
    help = "Re-encrypt every encrypted field value under the newest key of FIELD_ENCRYPTION_KEYS."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--batch-size", type=int, default=500)
        parser.add_argument("--database", default=DEFAULT_DB_ALIAS)
        parser.add_argument("--dry-run", action="store_true", help="Count what would change; write nothing.")

    def handle(self, *args: Any, batch_size: int, database: str, dry_run: bool, **options: Any) -> None:
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        encryption.reset_cipher()
        newest = self._newest_key()
        total = Counts()
        for model, field in encrypted_fields():
            counts = self._rotate_column(model, field, newest, database, batch_size, dry_run)
            total.rotated += counts.rotated
            total.current += counts.current
            total.failed += counts.failed
            self.stdout.write(
                f"{model._meta.label}.{field.name}: {counts.rotated} re-encrypted, "
                f"{counts.current} already current, {counts.failed} undecryptable"
            )
        verb = "would re-encrypt" if dry_run else "re-encrypted"
        self.stdout.write(
            f"Total: {verb} {total.rotated}, {total.current} already current, {total.failed} undecryptable."
        )
        if total.failed:
            raise CommandError(
                f"{total.failed} values cannot be decrypted with the configured keys; "
                "keep the key they were written with in FIELD_ENCRYPTION_KEYS and run again."
            )

    def _newest_key(self) -> Fernet:
        keys = list(settings.FIELD_ENCRYPTION_KEYS)
        if not keys:
            raise CommandError(
                "FIELD_ENCRYPTION_KEYS is not set: secrets use the development key and there is "
                "nothing to rotate. Set FIELD_ENCRYPTION_KEYS=<new key>,<development key> first."
            )
        try:
            return Fernet(keys[0].encode())
        except ValueError as error:
            raise CommandError("The first FIELD_ENCRYPTION_KEYS entry is not a Fernet key.") from error

    def _rotate_column(
        self,
        model: type[Model],
        field: Field,
        newest: Fernet,
        database: str,
        batch_size: int,
        dry_run: bool,
    ) -> Counts:
        connection = connections[database]
        quote = connection.ops.quote_name
        primary_key = model._meta.pk
        assert primary_key is not None and primary_key.column and field.column  # concrete fields have columns
        table, column, pk_column = quote(model._meta.db_table), quote(field.column), quote(primary_key.column)
        select = (
            f"SELECT {pk_column}, {column} FROM {table} "  # noqa: S608 - quoted identifiers, no input
            f"WHERE {column} IS NOT NULL AND {column} <> '' {{after}} ORDER BY {pk_column} LIMIT %s"
        )
        update = f"UPDATE {table} SET {column} = %s WHERE {pk_column} = %s AND {column} = %s"  # noqa: S608
        counts = Counts()
        last_pk: Any = None
        while True:
            with connection.cursor() as cursor:
                if last_pk is None:
                    cursor.execute(select.format(after=""), [batch_size])
                else:
                    cursor.execute(select.format(after=f"AND {pk_column} > %s"), [last_pk, batch_size])
                rows = cursor.fetchall()
            if not rows:
                return counts
            updates = []
            for pk, ciphertext in rows:
                try:
                    newest.decrypt(ciphertext.encode())
                    counts.current += 1
                    continue
                except InvalidToken:
                    pass
                try:
                    updates.append((encryption.rotate(ciphertext), pk, ciphertext))
                    counts.rotated += 1
                except encryption.DecryptionError:
                    counts.failed += 1
            if updates and not dry_run:
                with transaction.atomic(using=database), connection.cursor() as cursor:
                    cursor.executemany(update, updates)
            last_pk = rows[-1][0]

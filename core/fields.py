"""Model fields for secrets: encrypted at rest, never stored or logged in plaintext."""

import json
from typing import Any

from django.db import models

from core import encryption


class EncryptedTextField(models.TextField):
    """Stores Fernet ciphertext; Python code sees plaintext. Empty stays empty.

    Not searchable or orderable by content: the column holds only ciphertext.
    """

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> str | None:
        if value is None or value == "":
            return value
        return encryption.decrypt(value)

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        if value is None or value == "":
            return value
        return encryption.encrypt(value)


class EncryptedJSONField(models.TextField):
    """A JSON document (e.g. a dict of header secrets) stored encrypted as one value."""

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> Any:
        if value is None or value == "":
            return {}
        return json.loads(encryption.decrypt(value))

    def to_python(self, value: Any) -> Any:
        return value if value is not None else {}

    def get_prep_value(self, value: Any) -> Any:
        if not value:
            return ""
        return encryption.encrypt(json.dumps(value, sort_keys=True))

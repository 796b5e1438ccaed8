"""A stored file's bytes go when its row goes, however it goes: a service, a deleted session
or tenant (cascades), the admin. A signal is the one hook every cascade passes through."""

from typing import Any

from django.db import transaction

from files.models import StoredFile


def delete_blob_after_commit(sender: type[StoredFile], instance: StoredFile, **kwargs: Any) -> None:
    name, storage = instance.blob.name, instance.blob.storage
    if name:
        # After the commit: a rolled-back delete keeps its bytes.
        transaction.on_commit(lambda: storage.delete(name), using=kwargs.get("using"))

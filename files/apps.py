from django.apps import AppConfig
from django.db.models.signals import post_delete


class FilesConfig(AppConfig):
    name = "files"
    verbose_name = "Files and knowledge"

    def ready(self) -> None:
        from files.models import StoredFile
        from files.signals import delete_blob_after_commit

        post_delete.connect(delete_blob_after_commit, sender=StoredFile, dispatch_uid="files.delete_blob")

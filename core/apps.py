from django.apps import AppConfig

from core.logging import mask_server_log_secrets


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Agentry core"

    def ready(self) -> None:
        # After Django applied LOGGING, in every process that loads the app (uvicorn's included).
        mask_server_log_secrets()
        # drf-spectacular finds schema extensions by their import.
        import core.api.schema  # noqa: F401

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# Sets Django up, which the imports below (models) need first; as get_asgi_application does.
django.setup(set_prefix=False)

from channels.routing import ProtocolTypeRouter  # noqa: E402
from django.conf import settings  # noqa: E402

from core.http_application import HttpApplication  # noqa: E402
from sessions.routing import websocket_application  # noqa: E402

application = ProtocolTypeRouter(
    {"http": HttpApplication(threads=settings.SERVER_THREADS), "websocket": websocket_application()}
)

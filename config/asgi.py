import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup(set_prefix=False)

# These imports need Django set up first.
from channels.routing import ProtocolTypeRouter  # noqa: E402

from core.asgi_handler import SyncChainASGIHandler  # noqa: E402
from sessions.routing import websocket_application  # noqa: E402

django_asgi_app = SyncChainASGIHandler()

application = ProtocolTypeRouter({"http": django_asgi_app, "websocket": websocket_application()})

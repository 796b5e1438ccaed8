"""Logging filters that mask secrets that slipped into a log line."""

import logging
import re

# API keys (agt_…), provider keys (sk-…, sk-ant-…) and bearer tokens.
SECRET_PATTERNS = [
    re.compile(r"agt_[A-Za-z0-9]{6,}_[A-Za-z0-9_\-]{8,}"),
    re.compile(r"sk-(?:ant-)?[A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-]{8,}"),
    # A credential in a query string (`/ws/sessions/…/?token=…`), whatever its shape or encoding.
    re.compile(r"(?i)([?&](?:token|access_token|api_key|key)=)[^&\s\"']+"),
]
# The servers' loggers that write request lines: uvicorn's access log, and its error log, which is
# where it writes each websocket handshake ('… - "WebSocket /ws/…?token=…" [accepted]').
SERVER_LOGGERS = ("uvicorn.access", "uvicorn.error")


def mask_secrets(text: str) -> str:
    for pattern in SECRET_PATTERNS:
        text = pattern.sub(lambda match: (match.group(1) if match.groups() else "") + "***", text)
    return text


class MaskSecretsFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask_secrets(message)
        if masked != message:
            record.msg = masked
            record.args = ()
        return True


class MaskRequestLineSecretsFilter(logging.Filter):
    """Masks each argument of a server's log record, keeping their number and order.

    uvicorn's access formatter reads the record's arguments one by one (client, method, path…),
    so they stay a tuple; a secret the masking of single arguments misses drops them all.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(mask_secrets(arg) if isinstance(arg, str) else arg for arg in record.args)
        if isinstance(record.msg, str):
            record.msg = mask_secrets(record.msg)
        message = record.getMessage()
        masked = mask_secrets(message)
        if masked != message:
            record.msg = masked
            record.args = ()
        return True


def mask_server_log_secrets() -> None:
    """Install the masking on the servers' loggers, whatever handlers the server configured for them.

    Filters on a logger apply to the records logged on it before any handler sees them; naming
    these loggers in ``LOGGING`` instead would replace the handlers and formats uvicorn set up.
    """
    for name in SERVER_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(existing, MaskRequestLineSecretsFilter) for existing in logger.filters):
            logger.addFilter(MaskRequestLineSecretsFilter())

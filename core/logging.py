"""A logging filter that masks secrets that slipped into a log message."""

import logging
import re

# API keys (agt_…), provider keys (sk-…, sk-ant-…) and bearer tokens.
SECRET_PATTERNS = [
    re.compile(r"agt_[A-Za-z0-9]{6,}_[A-Za-z0-9_\-]{8,}"),
    re.compile(r"sk-(?:ant-)?[A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-]{8,}"),
]


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

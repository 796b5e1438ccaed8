"""Field encryption for secrets at rest: Fernet keys through MultiFernet so keys rotate.

Keys come from ``FIELD_ENCRYPTION_KEYS`` (comma-separated, newest first). Without them (outside
production), a key is generated once and kept in the data directory, readable by its owner only.
"""

import logging
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from config.data_dir import read_or_create_secret

logger = logging.getLogger(__name__)


class DecryptionError(Exception):
    """A stored secret could not be decrypted with any configured key."""


def _development_key() -> str:
    key_file = settings.FIELD_ENCRYPTION_DEV_KEY_FILE
    if not key_file.exists():
        logger.warning(
            "FIELD_ENCRYPTION_KEYS is not set: generating a key in %s. "
            "Set FIELD_ENCRYPTION_KEYS in production.",
            key_file,
        )
    return read_or_create_secret(key_file, lambda: Fernet.generate_key().decode())


@lru_cache(maxsize=1)
def _cipher() -> MultiFernet:
    keys = list(settings.FIELD_ENCRYPTION_KEYS) or [_development_key()]
    try:
        return MultiFernet([Fernet(key.encode()) for key in keys])
    except ValueError as error:
        raise ImproperlyConfigured(
            "FIELD_ENCRYPTION_KEYS must hold url-safe base64 Fernet keys (32 bytes each)"
        ) from error


def reset_cipher() -> None:
    """Forget the cached keys (after settings change, e.g. in tests or key rotation)."""
    _cipher.cache_clear()


def encrypt(plaintext: str) -> str:
    return _cipher().encrypt(plaintext.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return _cipher().decrypt(token.encode()).decode()
    except InvalidToken as error:
        raise DecryptionError("secret cannot be decrypted with the configured keys") from error


def rotate(token: str) -> str:
    """Re-encrypt ``token`` under the newest key."""
    try:
        return _cipher().rotate(token.encode()).decode()
    except InvalidToken as error:
        raise DecryptionError("secret cannot be decrypted with the configured keys") from error

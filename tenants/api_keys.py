"""API key format, generation and verification. Only digests are stored."""

import hashlib
import hmac
import secrets
from dataclasses import dataclass

KEY_PREFIX = "agt"


@dataclass(frozen=True)
class GeneratedKey:
    prefix: str
    secret: str

    @property
    def plaintext(self) -> str:
        return f"{KEY_PREFIX}_{self.prefix}_{self.secret}"


def generate_key() -> GeneratedKey:
    return GeneratedKey(prefix=secrets.token_hex(6), secret=secrets.token_urlsafe(32))


def hash_secret(secret: str) -> str:
    # The secret carries 256 bits of entropy, so a fast digest is enough: there is
    # nothing to brute-force that a slow hash would protect.
    return hashlib.sha256(secret.encode()).hexdigest()


def split_key(plaintext: str) -> tuple[str, str] | None:
    """Return (prefix, secret) of a well-formed key, else None."""
    parts = plaintext.split("_", 2)
    if len(parts) != 3 or parts[0] != KEY_PREFIX or not parts[1] or not parts[2]:
        return None
    return parts[1], parts[2]


def secret_matches(secret: str, secret_hash: str) -> bool:
    return hmac.compare_digest(hash_secret(secret), secret_hash)

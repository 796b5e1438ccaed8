"""Reading settings from the environment, with typed helpers and clear start-up errors."""

import os

from django.core.exceptions import ImproperlyConfigured

TRUE_WORDS = {"1", "true", "yes", "on"}
FALSE_WORDS = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, got {raw!r}")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError as error:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from error


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw)
    except ValueError as error:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from error


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_is_set(name: str) -> bool:
    return name in os.environ


def require_in_production(name: str, value: object, *, is_production: bool) -> None:
    """In production (DEBUG=false said outright) a missing secret stops start-up, naming the variable."""
    if is_production and not value:
        raise ImproperlyConfigured(
            f"{name} is not set. It is required with DEBUG=false (production); see .env.example."
        )

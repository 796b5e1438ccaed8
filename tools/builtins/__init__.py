"""Built-in tools. Each module registers its tools in ``tools.builtins.base.BUILTIN_REGISTRY``."""

import importlib
import pkgutil


def load_builtin_tools() -> None:
    """Import every module of this package, so each registers its tools (idempotent)."""
    for module in pkgutil.iter_modules(__path__):
        if module.name != "base":
            importlib.import_module(f"{__name__}.{module.name}")

"""Built-in tools. Each module registers its tools in ``tools.builtins.base.BUILTIN_REGISTRY``."""

import importlib
import pkgutil
from functools import lru_cache


@lru_cache(maxsize=1)
def load_builtin_tools() -> None:
    """Import every module of this package, so each registers its tools (once per process)."""
    for module in pkgutil.iter_modules(__path__):
        if module.name != "base":
            importlib.import_module(f"{__name__}.{module.name}")

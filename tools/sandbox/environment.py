"""The sandbox's Python: a venv that ``make`` builds from requirements-sandbox.txt.

It lives outside any folder the sandbox otherwise sees and is bound read-only at its real
path, so its ``bin/python`` (a link to the system's /usr/bin/python3) resolves inside too.
"""

import os
from pathlib import Path

from django.conf import settings

REQUIRED_MODULES = ("numpy", "pandas", "matplotlib")
BUILD_HINT = "run `make sandbox-python` (needs /usr/bin/python3 and access to PyPI)"


def sandbox_python_dir() -> Path:
    return Path(settings.SANDBOX_PYTHON_DIR)


def sandbox_python() -> Path:
    return sandbox_python_dir() / "bin" / "python"


def sandbox_python_status() -> tuple[bool, str]:
    """(built, why not): the interpreter and each curated package must be in place."""
    python = sandbox_python()
    if not python.exists():
        return False, f"the sandbox Python is not built at {sandbox_python_dir()}: {BUILD_HINT}"
    site_packages = list(sandbox_python_dir().glob("lib/python3*/site-packages"))
    missing = [
        module
        for module in REQUIRED_MODULES
        if not any((folder / module).is_dir() for folder in site_packages)
    ]
    if missing:
        return False, f"the sandbox Python lacks {', '.join(missing)}: {BUILD_HINT}"
    return True, ""


def closed_folder_reason(paths: list[Path]) -> str:
    """As root the sandbox runs as another uid: every folder above these must let others pass."""
    if os.geteuid() != 0:
        return ""
    for path in paths:
        for folder in [path, *path.parents]:
            if folder.exists() and not folder.stat().st_mode & 0o001:
                return f"{folder} lets no other user pass (chmod o+x), so the sandbox cannot reach {path}"
    return ""

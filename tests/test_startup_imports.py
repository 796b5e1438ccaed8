"""Start-up stays light: the model providers' and MCP's SDKs load when first used, not before."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY_SDKS = ["anthropic", "openai", "mcp"]

CHECK_AND_LIST = """
import sys
from django.core.management import execute_from_command_line
execute_from_command_line(["manage.py", "check"])
print(",".join(name for name in {names!r} if name in sys.modules))
"""


def test_manage_py_check_imports_no_model_or_mcp_sdk() -> None:
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"}
    completed = subprocess.run(
        [sys.executable, "-c", CHECK_AND_LIST.format(names=HEAVY_SDKS)],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines()[-1] == ""

"""The README's API quick-start, run as the script it is, against a live server and worker."""

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sessions.models import Run, RunStatus
from tests.live import ROOT, LiveStack

README_ADDRESS = "http://127.0.0.1:8000"

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed"),
    pytest.mark.timeout(180),
]


def quick_start_script() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## API quick-start", 1)[1]
    match = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert match, "the API quick-start has no sh block"
    return match.group(1)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[LiveStack]:
    live = LiveStack(tmp_path)
    live.start_server()
    live.start_worker(workers=1)
    yield live
    live.stop()


def test_the_api_quick_start_runs_as_a_script_and_ends_with_the_run(stack: LiveStack) -> None:
    script = quick_start_script().replace(README_ADDRESS, stack.base_url)
    script = script.replace(".venv/bin/python", sys.executable)

    finished = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=ROOT,
        env=stack.environment,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert finished.returncode == 0, finished.stderr + stack.logs()
    run = Run.objects.get()
    assert run.status == RunStatus.COMPLETED
    # The JSON page comes first, the event stream right after it.
    events_page, end = json.JSONDecoder().raw_decode(finished.stdout)
    stream = finished.stdout[end:]
    stored = events_page["results"]
    assert stored[0]["type"] == "run.queued"
    stream_events = re.findall(r"^event: (\S+)$", stream, re.MULTILINE)
    assert stream_events[-1] == "run.completed"
    assert "84" in stream

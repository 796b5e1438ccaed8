"""The files a ``code_run`` left in ``output/``, and their hand-over to the artifacts store."""

import os
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG
from typing import Any

from files.artifacts import store_artifacts
from tools.builtins.base import ToolContext

# Files past this many are not listed or handed over (a loop writing thousands of files).
MAX_OUTPUT_FILES = 50


@dataclass(frozen=True)
class OutputFile:
    name: str  # relative to output/, with "/" between folders
    path: Path
    size: int


def collect_outputs(output_dir: Path) -> list[OutputFile]:
    """Regular files only: a symlink written by the sandbox could point anywhere on the host."""
    if output_dir.is_symlink() or not output_dir.is_dir():
        return []  # the code replaced output/ itself, perhaps by a link to a host folder
    found: list[OutputFile] = []
    for folder, folders, files in os.walk(output_dir):
        folders.sort()
        for name in sorted(files):
            path = Path(folder) / name
            status = os.lstat(path)
            if S_ISREG(status.st_mode):
                found.append(OutputFile(path.relative_to(output_dir).as_posix(), path, status.st_size))
    return found[:MAX_OUTPUT_FILES]


def hand_over_outputs(context: ToolContext, outputs: list[OutputFile]) -> list[dict[str, Any]]:
    """Stores the outputs as artifacts of the run (``files.artifacts``), in the same order."""
    if not outputs:
        return []
    return store_artifacts(context, [(output.name, output.path) for output in outputs])

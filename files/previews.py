"""What a file card shows of a file without downloading it: an image inline, a CSV's first rows,
a text's first characters. Read from the head of the stored bytes, never the whole file."""

import csv
import io
from typing import Any, Literal

from files.models import StoredFile
from files.sniffing import CSV, CSV_DELIMITERS, JSON, is_image, text_encoding

PreviewKind = Literal["image", "csv", "text", "none"]

# Enough for the rows and characters shown, with room for a row cut at the end.
PREVIEW_READ_BYTES = 64 * 1024
PREVIEW_ROWS = 10
PREVIEW_COLUMNS = 20
PREVIEW_CELL_CHARACTERS = 200
PREVIEW_TEXT_CHARACTERS = 2000


def file_preview(stored: StoredFile) -> dict[str, Any]:
    """``{"kind", "rows", "text", "is_truncated"}``: rows for a CSV, text for other text files."""
    kind = preview_kind(stored.content_type)
    if kind in ("image", "none"):
        return _preview(kind)
    with stored.blob.open("rb") as blob:
        head = blob.read(PREVIEW_READ_BYTES + 1)
    is_complete = len(head) <= PREVIEW_READ_BYTES
    text = head[:PREVIEW_READ_BYTES].decode(text_encoding(head, is_complete=is_complete), errors="replace")
    if kind == "csv":
        return _csv_preview(text, is_complete=is_complete)
    return _preview(
        "text", text=text[:PREVIEW_TEXT_CHARACTERS], is_truncated=len(text) > PREVIEW_TEXT_CHARACTERS
    )


def preview_kind(content_type: str) -> PreviewKind:
    if is_image(content_type):
        return "image"
    if content_type == CSV:
        return "csv"
    if content_type.startswith("text/") or content_type == JSON:
        return "text"
    return "none"


def _preview(
    kind: PreviewKind, *, rows: list[list[str]] | None = None, text: str = "", is_truncated: bool = False
) -> dict[str, Any]:
    return {"kind": kind, "rows": rows or [], "text": text, "is_truncated": is_truncated}


def _csv_preview(text: str, *, is_complete: bool) -> dict[str, Any]:
    lines = text.splitlines(keepends=True)
    if not is_complete:
        lines = lines[:-1]  # the head may end inside a row
    try:
        dialect: Any = csv.Sniffer().sniff("".join(lines[:50]), delimiters=CSV_DELIMITERS)
    except csv.Error:
        dialect = csv.excel
    rows: list[list[str]] = []
    try:
        for row in csv.reader(io.StringIO("".join(lines)), dialect):
            if len(rows) == PREVIEW_ROWS:
                return _preview("csv", rows=rows, is_truncated=True)
            rows.append([cell[:PREVIEW_CELL_CHARACTERS] for cell in row[:PREVIEW_COLUMNS]])
    except csv.Error:
        return _preview("csv", rows=rows, is_truncated=True)  # a quoted field cut at the head's end
    return _preview("csv", rows=rows, is_truncated=not is_complete)

"""What kind of file an upload is, decided from its bytes rather than its name.

The bytes decide the family: PDF, DOCX, image, text, or refused (empty, executable,
archive, unknown binary). A name cannot turn an executable into a PDF. Within text, the
name only picks among subtypes the bytes cannot tell apart (CSV, Markdown, and JSON too
long to parse from its head); HTML and short JSON are recognised from their content.
"""

import codecs
import csv
import io
import json
import re
import zipfile
from typing import BinaryIO

PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
HTML = "text/html"
MARKDOWN = "text/markdown"
PLAIN_TEXT = "text/plain"
CSV = "text/csv"
JSON = "application/json"
PNG = "image/png"
JPEG = "image/jpeg"
GIF = "image/gif"
WEBP = "image/webp"
IMAGE_CONTENT_TYPES = frozenset({PNG, JPEG, GIF, WEBP})
SUPPORTED_CONTENT_TYPES = frozenset({PDF, DOCX, HTML, MARKDOWN, PLAIN_TEXT, CSV, JSON}) | IMAGE_CONTENT_TYPES

# How much of a file decides its type: callers pass this many leading bytes (or the whole file).
SNIFF_BYTES = 8192
DOCX_REQUIRED_PARTS = frozenset({"word/document.xml", "[Content_Types].xml"})

EMPTY_REASON = "the file is empty"
EXECUTABLE_REASON = "an executable program, not a document"
ARCHIVE_REASON = "archives are not supported"
BINARY_REASON = "unsupported file type (looks like binary data)"
# Word stores password-protected .docx files, like the pre-2007 formats, in this container.
OLE_REASON = (
    "an encrypted or old-format Office document (.doc, .xls, .ppt): "
    "save it as .docx without a password and upload it again"
)

IMAGE_SIGNATURES = ((b"\x89PNG\r\n\x1a\n", PNG), (b"\xff\xd8\xff", JPEG), (b"GIF87a", GIF), (b"GIF89a", GIF))
EXECUTABLE_SIGNATURES = (
    b"\x7fELF",
    b"\xfe\xed\xfa\xce",
    b"\xfe\xed\xfa\xcf",
    b"\xce\xfa\xed\xfe",
    b"\xcf\xfa\xed\xfe",
    b"\xca\xfe\xba\xbe",  # a universal Mach-O binary (and a Java class file)
)
ZIP_SIGNATURES = (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08")
ARCHIVE_SIGNATURES = (
    b"\x1f\x8b",  # gzip
    b"7z\xbc\xaf\x27\x1c",
    b"Rar!\x1a\x07",
    b"\xfd7zXZ\x00",
    b"\x28\xb5\x2f\xfd",  # zstandard
)
OLE_SIGNATURE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
TAR_MAGIC_OFFSET = 257
TAR_MAGICS = (b"ustar\x00", b"ustar ")
# Two-letter and three-letter signatures also start ordinary text: a DOS/Windows program's
# header holds NUL bytes, and bzip2's first block has its own magic number.
DOS_EXECUTABLE = re.compile(rb"MZ[^\x00]{0,62}\x00", re.DOTALL)
BZIP2 = re.compile(rb"BZh[1-9]1AY&SY")
UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
# Binary data is full of NUL bytes and control characters; text has hardly any, nor bytes
# its encoding cannot decode.
MAX_INVALID_CHARACTER_SHARE = 0.02
MAX_CONTROL_CHARACTER_SHARE = 0.01
ALLOWED_CONTROL_CHARACTERS = frozenset("\t\n\r\f\v\x1b")
HTML_START = re.compile(r"<!doctype\s+html|<html[\s>]", re.IGNORECASE)
HTML_TAG = re.compile(r"<[a-zA-Z][a-zA-Z0-9]*(\s[^<>]*)?>")
CSV_DELIMITERS = ",;\t|"
CSV_SAMPLE_LINES = 50


class UnsupportedFile(Exception):
    """The upload is not a document Agentry can read; ``reason`` says why, for its owner."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def is_image(content_type: str) -> bool:
    return content_type in IMAGE_CONTENT_TYPES


def detect_file_content_type(fileobj: BinaryIO, name: str) -> str:
    """The content type of a seekable file, looking inside zip files for a Word document.

    Reads from the start and leaves the position at the start again.
    """
    fileobj.seek(0)
    head = fileobj.read(SNIFF_BYTES)
    try:
        if head.startswith(ZIP_SIGNATURES):
            fileobj.seek(0)
            return _zip_content_type(fileobj)
        return detect_content_type(head, name)
    finally:
        fileobj.seek(0)


def detect_content_type(head: bytes, name: str) -> str:
    """The content type of a file from its first ``SNIFF_BYTES`` (or all of it, if shorter).

    Raises ``UnsupportedFile`` for what Agentry refuses. A zip file's head cannot tell a
    DOCX from an archive: unless ``head`` is the whole file, use ``detect_file_content_type``.
    """
    if not head:
        raise UnsupportedFile(EMPTY_REASON)
    if binary_type := _binary_content_type(head):
        return binary_type
    if head.startswith(ZIP_SIGNATURES):
        if len(head) >= SNIFF_BYTES:
            raise ValueError("a zip file's head cannot tell a DOCX from an archive: pass the whole file")
        return _zip_content_type(io.BytesIO(head))
    text = _decoded_head(head, is_complete=len(head) < SNIFF_BYTES)
    if text is None:
        raise UnsupportedFile(BINARY_REASON)
    return _text_content_type(text, name.lower(), is_complete=len(head) < SNIFF_BYTES)


def text_encoding(data: bytes, *, is_complete: bool = True) -> str:
    """The codec for a text file's bytes: its BOM's (UTF-8 or UTF-16), else UTF-8 when valid.

    Bytes that are not UTF-8 are taken as Windows-1252, the usual encoding of older text
    files (it maps all but five bytes, which decode as replacement characters). With
    ``is_complete`` false, a character cut at the end of ``data`` does not count as invalid.
    """
    if data.startswith(UTF16_BOMS):
        return "utf-16"
    if data.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    try:
        codecs.getincrementaldecoder("utf-8")().decode(data, final=is_complete)
    except UnicodeDecodeError:
        return "cp1252"
    return "utf-8"


def _binary_content_type(head: bytes) -> str | None:
    """The type of a file recognised by its signature, or None when it has none.

    A PDF must start with its ``%PDF-`` header: readers tolerate junk before it, but text
    that merely mentions the header would then pass for a PDF.
    """
    if head.startswith(EXECUTABLE_SIGNATURES) or DOS_EXECUTABLE.match(head):
        raise UnsupportedFile(EXECUTABLE_REASON)
    if (
        head.startswith(ARCHIVE_SIGNATURES)
        or BZIP2.match(head)
        or head[TAR_MAGIC_OFFSET : TAR_MAGIC_OFFSET + 6] in TAR_MAGICS
    ):
        raise UnsupportedFile(ARCHIVE_REASON)
    if head.startswith(OLE_SIGNATURE):
        raise UnsupportedFile(OLE_REASON)
    if head.lstrip().startswith(b"%PDF-"):
        return PDF
    for signature, content_type in IMAGE_SIGNATURES:
        if head.startswith(signature):
            return content_type
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return WEBP
    return None


def _zip_content_type(fileobj: BinaryIO) -> str:
    try:
        with zipfile.ZipFile(fileobj) as archive:
            names = set(archive.namelist())
    except zipfile.BadZipFile as error:
        raise UnsupportedFile(ARCHIVE_REASON) from error
    if names >= DOCX_REQUIRED_PARTS:
        return DOCX
    raise UnsupportedFile(ARCHIVE_REASON)


def _decoded_head(head: bytes, *, is_complete: bool) -> str | None:
    """The head as text, or None when it looks like binary data."""
    encoding = text_encoding(head, is_complete=is_complete)
    if encoding != "utf-16" and b"\x00" in head:
        return None
    # An incremental decoder leaves a character cut at the head's end undecoded.
    text = codecs.getincrementaldecoder(encoding)(errors="replace").decode(head, final=is_complete)
    invalid = text.count("\ufffd")
    control = sum(1 for character in text if _is_control(character))
    if invalid > len(text) * MAX_INVALID_CHARACTER_SHARE or control > len(text) * MAX_CONTROL_CHARACTER_SHARE:
        return None
    return text


def _is_control(character: str) -> bool:
    code = ord(character)
    return (code < 32 or code == 127) and character not in ALLOWED_CONTROL_CHARACTERS


def _text_content_type(text: str, name: str, *, is_complete: bool) -> str:
    stripped = text.lstrip()
    if _is_json(stripped, name, is_complete=is_complete):
        return JSON
    if HTML_START.match(stripped) or (name.endswith((".html", ".htm")) and HTML_TAG.search(text)):
        return HTML
    if name.endswith(".csv") and _looks_like_csv(text, is_complete=is_complete):
        return CSV
    if name.endswith((".md", ".markdown")):
        return MARKDOWN
    return PLAIN_TEXT


def _is_json(stripped: str, name: str, *, is_complete: bool) -> bool:
    """A whole file is JSON when it parses as an object or array; a long one, by its name too."""
    if not stripped.startswith(("{", "[")):
        return False
    if not is_complete:
        return name.endswith(".json")
    try:
        json.loads(stripped)
    except (ValueError, RecursionError):
        return False
    return True


def _looks_like_csv(text: str, *, is_complete: bool) -> bool:
    lines = text.splitlines()
    if not is_complete:
        lines = lines[:-1]  # the head may end inside a row
    sample = "\n".join(lines[:CSV_SAMPLE_LINES])
    if not sample.strip():
        return False
    try:
        csv.Sniffer().sniff(sample, delimiters=CSV_DELIMITERS)
    except csv.Error:
        return _has_consistent_delimiter(lines[:CSV_SAMPLE_LINES])
    return True


def _has_consistent_delimiter(lines: list[str]) -> bool:
    rows = [line for line in lines if line.strip()]
    for delimiter in CSV_DELIMITERS:
        counts = {line.count(delimiter) for line in rows}
        if len(counts) == 1 and counts != {0}:
            return True
    return False

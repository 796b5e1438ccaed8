"""The text of an uploaded document, in sections that know where they came from.

A PDF gives one section per page with text (``page`` is 1-based); DOCX, HTML and Markdown
give one section per heading, named by it; plain text and JSON one section; CSV one per
block of rows. Every failure is an ``ExtractionError`` whose reason its owner can act on.
Text files are decoded as ``sniffing.text_encoding`` says (BOM, UTF-8, else Windows-1252),
undecodable bytes replaced.

A PDF encrypted with an empty user password opens in any viewer without asking, so it is
read; one that needs a password is refused. DOCX parts are parsed by python-docx's lxml
parser, built with ``resolve_entities=False`` (and lxml never loads external DTDs or
entities over the network by default), so entity expansion cannot blow up or leak files.
"""

import csv
import io
import json
import re
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

import docx
import docx.document
import docx.opc.exceptions
import docx.table
import docx.text.paragraph
import lxml.etree
import pypdf
import pypdf.errors

from core.storable import storable_text
from files import sniffing
from tools.builtins.html_text import html_to_text

MAX_EXTRACTED_CHARACTERS = 5_000_000
# UTF-8 spends at most four bytes on a character: more bytes than this cannot fit the cap.
MAX_TEXT_BYTES = 4 * MAX_EXTRACTED_CHARACTERS
MAX_PDF_PAGES = 2000
MAX_UNCOMPRESSED_BYTES = 200 * 1024 * 1024
MAX_ZIP_ENTRIES = 10_000
MAX_COMPRESSION_RATIO = 100
# Small parts compress well for honest reasons (repetitive XML); only a big one is suspicious.
COMPRESSION_RATIO_MIN_BYTES = 1024 * 1024
MAX_CSV_ROWS = 100_000
CSV_ROWS_PER_SECTION = 50
HEADING_STYLE_PREFIXES = ("Heading", "Title")
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
CODE_FENCE = re.compile(r"^ {0,3}(```|~~~)")

# pypdf raises its own errors for most malformed files; broken streams and object tables
# can still surface as these from the code beneath it.
MALFORMED_PDF_ERRORS = (
    pypdf.errors.PyPdfError,
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
    IndexError,
    struct.error,
    zlib.error,
    RecursionError,
)
MALFORMED_DOCX_ERRORS = (
    docx.opc.exceptions.PackageNotFoundError,
    zipfile.BadZipFile,
    lxml.etree.XMLSyntaxError,
    KeyError,
    ValueError,
)


class ExtractionError(Exception):
    """The document's text could not be read; ``reason`` says why, for its owner."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Section:
    """A run of a document's text and where it sits: its page (PDF) or nearest heading above."""

    text: str
    page: int | None
    heading: str


def extract_sections(fileobj: BinaryIO, content_type: str) -> list[Section]:
    """The text of ``fileobj`` (read from the start) as sections; none for an image."""
    if sniffing.is_image(content_type):
        return []
    extractor = EXTRACTORS.get(content_type)
    if extractor is None:
        raise ExtractionError(f"Agentry cannot read text from {content_type} files")
    fileobj.seek(0)
    sections = [
        Section(text=storable_text(section.text), page=section.page, heading=storable_text(section.heading))
        for section in extractor(fileobj)
    ]
    _check_character_count(sum(len(section.text) for section in sections))
    return sections


def _check_character_count(count: int) -> None:
    if count > MAX_EXTRACTED_CHARACTERS:
        raise ExtractionError(
            f"the document holds more than {MAX_EXTRACTED_CHARACTERS:,} characters of text, "
            "more than Agentry reads from one file: split it into smaller files"
        )


def pdf_sections(fileobj: BinaryIO) -> list[Section]:
    reader = _open_pdf(fileobj)
    try:
        page_count = len(reader.pages)
        if page_count > MAX_PDF_PAGES:
            raise ExtractionError(
                f"the PDF has {page_count:,} pages, more than the {MAX_PDF_PAGES:,} allowed"
            )
        sections = []
        character_count = 0
        for number, page in enumerate(reader.pages, start=1):
            text = page.extract_text().strip()
            character_count += len(text)
            _check_character_count(character_count)
            if text:
                sections.append(Section(text=text, page=number, heading=""))
    except MALFORMED_PDF_ERRORS as error:
        raise ExtractionError(f"the PDF could not be read: {error}") from error
    if not sections:
        raise ExtractionError("the PDF has no text layer (scanned pages need OCR, which Agentry does not do)")
    return sections


def _open_pdf(fileobj: BinaryIO) -> pypdf.PdfReader:
    try:
        reader = pypdf.PdfReader(fileobj)
        # is_encrypted stays true after pypdf's own attempt with the empty password, so
        # ask again: only a PDF that opens without one is read.
        if reader.is_encrypted and reader.decrypt("") == pypdf.PasswordType.NOT_DECRYPTED:
            raise ExtractionError("the PDF is encrypted: remove its password and upload it again")
    except MALFORMED_PDF_ERRORS as error:
        raise ExtractionError(f"the PDF could not be read: {error}") from error
    return reader


def docx_sections(fileobj: BinaryIO) -> list[Section]:
    _check_zip_expansion(fileobj)
    fileobj.seek(0)
    try:
        document = docx.Document(fileobj)
        blocks = list(_docx_blocks(document))
    except MALFORMED_DOCX_ERRORS as error:
        raise ExtractionError(f"the document could not be read: {error}") from error
    return _sections_at_headings(blocks)


def _check_zip_expansion(fileobj: BinaryIO) -> None:
    """Refuse a zip bomb before any part is decompressed.

    ``zipfile`` never inflates an entry past its declared size, so the declared sizes
    bound what parsing the document can cost.
    """
    try:
        with zipfile.ZipFile(fileobj) as archive:
            entries = archive.infolist()
    except zipfile.BadZipFile as error:
        raise ExtractionError(f"the document could not be read: {error}") from error
    if len(entries) > MAX_ZIP_ENTRIES:
        raise ExtractionError(
            f"the document holds {len(entries):,} parts, "
            f"more than the {MAX_ZIP_ENTRIES:,} allowed (a zip bomb?)"
        )
    total = sum(entry.file_size for entry in entries)
    if total > MAX_UNCOMPRESSED_BYTES:
        raise ExtractionError(
            f"the document expands to {_megabytes(total)} MB, "
            f"more than the {_megabytes(MAX_UNCOMPRESSED_BYTES)} MB allowed (a zip bomb?)"
        )
    for entry in entries:
        ratio = entry.file_size // max(entry.compress_size, 1)
        if entry.file_size > COMPRESSION_RATIO_MIN_BYTES and ratio > MAX_COMPRESSION_RATIO:
            raise ExtractionError(
                f"the document's part {entry.filename} expands {ratio:,} times, "
                f"more than the {MAX_COMPRESSION_RATIO} allowed (a zip bomb?)"
            )


def _megabytes(size: int) -> int:
    return size // (1024 * 1024)


def _docx_blocks(document: docx.document.Document) -> Iterator[tuple[bool, str]]:
    """(is a heading, text) for each paragraph and table row of the body, in reading order."""
    for block in document.iter_inner_content():
        if isinstance(block, docx.text.paragraph.Paragraph):
            style_name = block.style.name if block.style is not None else ""
            yield (style_name or "").startswith(HEADING_STYLE_PREFIXES), block.text
        else:
            yield from ((False, row) for row in _table_rows(block))


def _table_rows(table: docx.table.Table) -> Iterator[str]:
    for row in table.rows:
        # A merged cell appears once per grid column it spans: keep it once.
        cells = list({id(cell._tc): cell.text.strip() for cell in row.cells}.values())
        if any(cells):
            yield " | ".join(cells)


def _sections_at_headings(blocks: list[tuple[bool, str]]) -> list[Section]:
    """Sections that start at each heading block and carry its text as their heading."""
    sections = []
    heading = ""
    lines: list[str] = []
    for is_heading, text in blocks:
        if is_heading and text.strip():
            sections.append(Section(text="\n".join(lines).strip(), page=None, heading=heading))
            heading, lines = text.strip(), []
        lines.append(text)
    sections.append(Section(text="\n".join(lines).strip(), page=None, heading=heading))
    return [section for section in sections if section.text]


def _read_text(fileobj: BinaryIO) -> str:
    data = fileobj.read(MAX_TEXT_BYTES + 1)
    encoding = sniffing.text_encoding(data, is_complete=len(data) <= MAX_TEXT_BYTES)
    text = data.decode(encoding, errors="replace")
    _check_character_count(len(text))
    return text


def html_sections(fileobj: BinaryIO) -> list[Section]:
    """Visible text split at h1 to h6; text before the first heading is named by the page title."""
    page = html_to_text(_read_text(fileobj))
    sections = _markdown_sections(page.text)
    if sections and sections[0].heading == "":
        sections[0] = Section(text=sections[0].text, page=None, heading=page.title)
    return sections


def markdown_sections(fileobj: BinaryIO) -> list[Section]:
    return _markdown_sections(_read_text(fileobj))


def _markdown_sections(text: str) -> list[Section]:
    """Sections split at ATX headings outside code fences, each keeping its lines as written."""
    blocks = []
    is_in_fence = False
    for line in text.splitlines():
        if CODE_FENCE.match(line):
            is_in_fence = not is_in_fence
        heading = None if is_in_fence else ATX_HEADING.match(line)
        blocks.append((heading is not None, line))
    sections = _sections_at_headings(blocks)
    return [
        Section(text=section.text, page=None, heading=_atx_heading_text(section.heading))
        for section in sections
    ]


def _atx_heading_text(line: str) -> str:
    match = ATX_HEADING.match(line)
    return (match.group(2) or "").strip() if match else line


def plain_text_sections(fileobj: BinaryIO) -> list[Section]:
    text = _read_text(fileobj).strip()
    return [Section(text=text, page=None, heading="")] if text else []


def json_sections(fileobj: BinaryIO) -> list[Section]:
    try:
        value = json.loads(_read_text(fileobj))
    except json.JSONDecodeError as error:
        raise ExtractionError(f"the JSON could not be parsed: {error}") from error
    except RecursionError as error:
        raise ExtractionError("the JSON is nested too deeply to read") from error
    return [Section(text=json.dumps(value, indent=2, ensure_ascii=False), page=None, heading="")]


def csv_sections(fileobj: BinaryIO) -> list[Section]:
    """Rows as ``column: value; …`` lines under the header's names, in blocks of rows."""
    text = _read_text(fileobj)
    try:
        rows = _csv_rows(text)
    except csv.Error as error:
        raise ExtractionError(f"the CSV could not be read: {error}") from error
    if not rows:
        return []
    header, records = rows[0], rows[1:]
    lines = [_csv_line(header, record) for record in records]
    return [
        Section(
            text="\n".join(lines[start : start + CSV_ROWS_PER_SECTION]),
            page=None,
            heading=f"rows {start + 1}-{min(start + CSV_ROWS_PER_SECTION, len(lines))}",
        )
        for start in range(0, len(lines), CSV_ROWS_PER_SECTION)
    ]


def _csv_rows(text: str) -> list[list[str]]:
    try:
        dialect: type[csv.Dialect] | csv.Dialect = csv.Sniffer().sniff(
            text[: sniffing.SNIFF_BYTES], delimiters=sniffing.CSV_DELIMITERS
        )
    except csv.Error:
        dialect = csv.excel
    rows = []
    for row in csv.reader(io.StringIO(text), dialect):
        if not any(value.strip() for value in row):
            continue
        rows.append(row)
        if len(rows) > MAX_CSV_ROWS + 1:
            raise ExtractionError(f"the CSV has more than {MAX_CSV_ROWS:,} rows, more than Agentry reads")
    return rows


def _csv_line(header: list[str], record: list[str]) -> str:
    names = header + [f"column {number}" for number in range(len(header) + 1, len(record) + 1)]
    # A short row leaves the last columns out, as empty values are.
    pairs = zip(names, record, strict=False)
    return "; ".join(f"{name.strip()}: {value.strip()}" for name, value in pairs if value.strip())


EXTRACTORS: dict[str, Callable[[BinaryIO], list[Section]]] = {
    sniffing.PDF: pdf_sections,
    sniffing.DOCX: docx_sections,
    sniffing.HTML: html_sections,
    sniffing.MARKDOWN: markdown_sections,
    sniffing.PLAIN_TEXT: plain_text_sections,
    sniffing.CSV: csv_sections,
    sniffing.JSON: json_sections,
}

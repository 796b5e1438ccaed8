"""Real documents built in memory, for tests and benchmarks of file uploads.

Each builder returns the bytes of a file as a user would upload it; none touches the disk.
"""

import functools
import io
import struct
import zipfile
import zlib

import docx
import fpdf
import pypdf
from PIL import Image

ENCRYPTED_PDF_PASSWORD = "capybara-secret"
ZIP_BOMB_PADDING_BYTES = 300 * 1024 * 1024


def pdf_bytes(pages: list[str]) -> bytes:
    """A PDF with one page per string, in core Helvetica (Latin-1 text only); lines wrap."""
    document = fpdf.FPDF()
    document.set_font("Helvetica", size=12)
    for text in pages:
        document.add_page()
        document.multi_cell(0, 8, text)
    return bytes(document.output())


def page_bomb_pdf_bytes(pages: int = 2000, operations_per_page: int = 50_000) -> bytes:
    """A PDF of about 300 KB whose pages all share one content stream of empty text operations.

    The stream compresses a thousandfold and holds no text, so no size or character limit
    catches it, yet a text extractor parses it once per page: minutes of CPU for the whole file.
    """
    content = zlib.compress(b"BT /F1 12 Tf " + b"0 0 Td () Tj " * operations_per_page + b"ET", 9)
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 3 0 R >> >> /Contents 4 0 R >>"
    )
    kids = b" ".join(b"%d 0 R" % (5 + index) for index in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(content) + content + b"\nendstream",
        *[page] * pages,
    ]
    return _pdf_file(objects)


def _pdf_file(objects: list[bytes]) -> bytes:
    """Objects numbered from 1, with the cross-reference table that locates them."""
    output = io.BytesIO()
    output.write(b"%PDF-1.7\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(output.tell())
        output.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    table_offset = output.tell()
    output.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    output.writelines(b"%010d 00000 n \n" % offset for offset in offsets)
    output.write(b"trailer\n<< /Size %d /Root 1 0 R >>\n" % (len(objects) + 1))
    output.write(b"startxref\n%d\n%%%%EOF\n" % table_offset)
    return output.getvalue()


def encrypted_pdf_bytes(text: str) -> bytes:
    """A one-page PDF that opens only with ``ENCRYPTED_PDF_PASSWORD``."""
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(pdf_bytes([text]))))
    writer.encrypt(user_password=ENCRYPTED_PDF_PASSWORD, algorithm="AES-256")
    output = io.BytesIO()
    writer.write(output)
    return output.getvalue()


def docx_bytes(paragraphs: list[tuple[str, str]]) -> bytes:
    """A Word document of (style, text) paragraphs, e.g. ``("Heading 1", "Budget")``, ``("Normal", …)``."""
    document = docx.Document()
    for style, text in paragraphs:
        document.add_paragraph(text, style=style)
    output = io.BytesIO()
    document.save(output)
    return output.getvalue()


@functools.cache
def zip_bomb_docx_bytes() -> bytes:
    """A valid Word document plus a part of 300 MB of zeros that compresses to about 300 KB.

    Written in blocks, so building it never holds the expanded part in memory.
    """
    output = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(docx_bytes([("Normal", "Nothing to see here.")]))) as source,
        zipfile.ZipFile(output, "w", zipfile.ZIP_DEFLATED) as bomb,
    ):
        for entry in source.infolist():
            bomb.writestr(entry, source.read(entry))
        block = bytes(1024 * 1024)
        with bomb.open("word/media/padding.bin", "w", force_zip64=True) as padding:
            for _ in range(ZIP_BOMB_PADDING_BYTES // len(block)):
                padding.write(block)
    return output.getvalue()


def png_bytes(width: int, height: int) -> bytes:
    """A solid-colour RGB PNG image."""
    output = io.BytesIO()
    Image.new("RGB", (width, height), color=(30, 120, 200)).save(output, format="PNG")
    return output.getvalue()


def elf_bytes() -> bytes:
    """The 64-byte header of a 64-bit little-endian x86-64 Linux executable, and nothing more."""
    identification = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    header = struct.pack(
        "<HHIQQQIHHHHHH",
        2,  # an executable file
        0x3E,  # x86-64
        1,  # ELF version
        0x400000,  # entry point
        64,  # program headers start right after this header
        0,  # no section headers
        0,
        64,  # this header's size
        56,  # a program header's size
        0,
        64,  # a section header's size
        0,
        0,
    )
    return identification + header

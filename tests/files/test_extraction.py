"""Sniffing, extraction and chunking of uploads: plain Python, no database."""

import codecs
import io
import itertools
import time
import zipfile

import docx
import pytest

from files import sniffing
from files.chunking import chunk_sections
from files.extraction import (
    MAX_EXTRACTED_CHARACTERS,
    MAX_PDF_PAGES,
    ExtractionError,
    Section,
    extract_sections,
)
from files.sniffing import UnsupportedFile, detect_content_type, detect_file_content_type, is_image
from tests.files.documents import (
    docx_bytes,
    elf_bytes,
    encrypted_pdf_bytes,
    pdf_bytes,
    png_bytes,
    zip_bomb_docx_bytes,
)

CAPYBARA_SENTENCE = "The capybara colony lives beside Lake Okeechobee"


def detect(data: bytes, name: str) -> str:
    return detect_file_content_type(io.BytesIO(data), name)


def extract(data: bytes, content_type: str) -> list[Section]:
    return extract_sections(io.BytesIO(data), content_type)


def refusal(data: bytes, name: str) -> str:
    with pytest.raises(UnsupportedFile) as caught:
        detect(data, name)
    return caught.value.reason


def extraction_failure(data: bytes, content_type: str) -> str:
    with pytest.raises(ExtractionError) as caught:
        extract(data, content_type)
    return caught.value.reason


def twenty_page_pdf() -> bytes:
    pages = [f"Page {number} is about the weather.\nNothing else happens here." for number in range(1, 21)]
    pages[13] = f"Field notes.\n{CAPYBARA_SENTENCE}. They graze at dawn."
    return pdf_bytes(pages)


def zip_bytes(entries: dict[str, bytes]) -> bytes:
    output = io.BytesIO()
    with zipfile.ZipFile(output, "w") as archive:
        for name, content in entries.items():
            archive.writestr(name, content)
    return output.getvalue()


@pytest.mark.parametrize(
    ("data", "name", "content_type"),
    [
        (pdf_bytes(["Hello"]), "notes.txt", sniffing.PDF),
        (docx_bytes([("Normal", "Hello")]), "notes.bin", sniffing.DOCX),
        (png_bytes(4, 3), "notes.txt", sniffing.PNG),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00", "photo.png", sniffing.JPEG),
        (b"GIF89a\x01\x00\x01\x00\x00\x00\x00;", "a.gif", sniffing.GIF),
        (b"RIFF\x24\x00\x00\x00WEBPVP8 ", "a.webp", sniffing.WEBP),
        (b'{"name": "alice", "tags": [1, 2]}', "data.txt", sniffing.JSON),
        (b"[1, 2, 3]\n", "numbers", sniffing.JSON),
        (b"{not json at all", "notes.txt", sniffing.PLAIN_TEXT),
        (b"  <!DOCTYPE html><title>x</title><p>Hi</p>", "page.txt", sniffing.HTML),
        (b"<html lang='en'><body>Hi</body></html>", "page", sniffing.HTML),
        (b"<p>Hello <b>there</b></p>", "fragment.html", sniffing.HTML),
        (b"<p>Hello</p>", "fragment.txt", sniffing.PLAIN_TEXT),
        (b"name,age\nalice,31\nbob,42\n", "people.csv", sniffing.CSV),
        (b"name;age\nalice;31\nbob;42\n", "people.CSV", sniffing.CSV),
        (b"name,age\nalice,31\n", "people.txt", sniffing.PLAIN_TEXT),
        (b"# Title\n\nSome *markdown*.\n", "readme.md", sniffing.MARKDOWN),
        (b"# Title\n\nSome *markdown*.\n", "readme.markdown", sniffing.MARKDOWN),
        (b"# Title\n\nSome *markdown*.\n", "readme.txt", sniffing.PLAIN_TEXT),
        (b"#!/bin/sh\necho hello\n", "run.sh", sniffing.PLAIN_TEXT),
        (codecs.BOM_UTF8 + "Caf\u00e9 cr\u00e8me".encode(), "menu.txt", sniffing.PLAIN_TEXT),
        ("Caf\u00e9 cr\u00e8me\n".encode("utf-16"), "menu.txt", sniffing.PLAIN_TEXT),
        (
            "Caf\u00e9 cr\u00e8me, na\u00efve fa\u00e7ade\n".encode("cp1252") * 20,
            "menu.txt",
            sniffing.PLAIN_TEXT,
        ),
    ],
)
def test_detects_content_type_from_bytes(data: bytes, name: str, content_type: str) -> None:
    assert detect(data, name) == content_type


def test_detects_long_json_by_name_and_first_character() -> None:
    long_json = b'[{"row": "' + b"x" * sniffing.SNIFF_BYTES + b'"}]'

    assert detect(long_json, "rows.json") == sniffing.JSON
    assert detect(long_json, "rows.txt") == sniffing.PLAIN_TEXT


def test_head_cut_inside_a_character_is_still_text() -> None:
    text = ("\u00e9" * sniffing.SNIFF_BYTES).encode()

    assert detect_content_type(text[: sniffing.SNIFF_BYTES - 1], "accents.txt") == sniffing.PLAIN_TEXT


@pytest.mark.parametrize(
    ("data", "name", "reason"),
    [
        (b"", "report.pdf", "the file is empty"),
        (elf_bytes(), "report.pdf", "an executable program, not a document"),
        (b"MZ\x90\x00\x03\x00\x00\x00\x04\x00", "setup.docx", "an executable program, not a document"),
        (b"\xcf\xfa\xed\xfe\x07\x00\x00\x01", "tool.txt", "an executable program, not a document"),
        (zip_bytes({"a.txt": b"hello"}), "report.docx", "archives are not supported"),
        (zip_bytes({"word/document.xml": b"<w/>"}), "report.docx", "archives are not supported"),
        (b"\x1f\x8b\x08\x00\x00\x00\x00\x00", "notes.txt", "archives are not supported"),
        (b"7z\xbc\xaf\x27\x1c\x00\x04", "notes.txt", "archives are not supported"),
        (b"Rar!\x1a\x07\x01\x00", "notes.txt", "archives are not supported"),
        (
            b"a.txt".ljust(257, b"\x00") + b"ustar\x0000" + bytes(245),
            "notes.txt",
            "archives are not supported",
        ),
        (bytes(range(256)) * 8, "data.txt", "unsupported file type (looks like binary data)"),
        (b"plain text \x00 with a NUL", "notes.txt", "unsupported file type (looks like binary data)"),
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1\x00", "old.doc", sniffing.OLE_REASON),
    ],
)
def test_refuses_what_is_not_a_document(data: bytes, name: str, reason: str) -> None:
    assert refusal(data, name) == reason


def test_text_that_starts_like_a_signature_is_still_text() -> None:
    assert detect(b"MZ is where the story starts.\n", "story.txt") == sniffing.PLAIN_TEXT
    assert detect(b"BZh, said nobody.\n", "story.txt") == sniffing.PLAIN_TEXT


def test_detection_leaves_the_file_at_its_start() -> None:
    upload = io.BytesIO(docx_bytes([("Normal", "Hello")]))
    upload.seek(10)

    detect_file_content_type(upload, "hello.docx")

    assert upload.tell() == 0


@pytest.mark.parametrize("content_type", sorted(sniffing.IMAGE_CONTENT_TYPES))
def test_is_image(content_type: str) -> None:
    assert is_image(content_type)
    assert not is_image(sniffing.PDF)


def test_pdf_page_holds_its_own_text() -> None:
    sections = extract(twenty_page_pdf(), sniffing.PDF)

    assert [section.page for section in sections] == list(range(1, 21))
    page_14 = sections[13]
    assert CAPYBARA_SENTENCE in page_14.text
    assert all(CAPYBARA_SENTENCE not in section.text for section in sections if section.page != 14)


def test_pdf_chunks_keep_their_page() -> None:
    chunks = chunk_sections(extract(twenty_page_pdf(), sniffing.PDF))

    capybara_chunks = [chunk for chunk in chunks if CAPYBARA_SENTENCE in chunk.text]
    assert [chunk.page for chunk in capybara_chunks] == [14]
    assert [chunk.ordinal for chunk in chunks] == list(range(20))


def test_encrypted_pdf_is_refused() -> None:
    reason = extraction_failure(encrypted_pdf_bytes("Secret plans"), sniffing.PDF)

    assert reason == "the PDF is encrypted: remove its password and upload it again"


def test_pdf_without_text_layer_is_refused() -> None:
    reason = extraction_failure(pdf_bytes(["", ""]), sniffing.PDF)

    assert reason == "the PDF has no text layer (scanned pages need OCR, which Agentry does not do)"


def test_malformed_pdf_is_refused() -> None:
    reason = extraction_failure(b"%PDF-1.7\nthis is not really a PDF\n", sniffing.PDF)

    assert reason.startswith("the PDF could not be read: ")


def test_pdf_with_too_many_pages_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("files.extraction.MAX_PDF_PAGES", 3)

    reason = extraction_failure(pdf_bytes(["a", "b", "c", "d"]), sniffing.PDF)

    assert reason == "the PDF has 4 pages, more than the 3 allowed"
    assert MAX_PDF_PAGES == 2000


def test_docx_headings_become_section_headings() -> None:
    document = docx_bytes(
        [
            ("Normal", "A preface."),
            ("Title", "Trip plan"),
            ("Normal", "We go in June."),
            ("Heading 1", "Budget"),
            ("Normal", "Flights cost 400 euros."),
            ("Heading 2", "Risks"),
            ("Normal", "Storms."),
        ]
    )

    sections = extract(document, sniffing.DOCX)

    assert sections == [
        Section(text="A preface.", page=None, heading=""),
        Section(text="Trip plan\nWe go in June.", page=None, heading="Trip plan"),
        Section(text="Budget\nFlights cost 400 euros.", page=None, heading="Budget"),
        Section(text="Risks\nStorms.", page=None, heading="Risks"),
    ]


def test_docx_tables_are_read_in_place() -> None:
    document = docx.Document()
    document.add_heading("Prices", level=1)
    table = document.add_table(rows=2, cols=2)
    for row, values in zip(table.rows, [("Item", "Euros"), ("Tent", "120")], strict=True):
        for cell, value in zip(row.cells, values, strict=True):
            cell.text = value
    document.add_paragraph("Prices include tax.")
    output = io.BytesIO()
    document.save(output)

    sections = extract(output.getvalue(), sniffing.DOCX)

    assert sections == [
        Section(text="Prices\nItem | Euros\nTent | 120\nPrices include tax.", page=None, heading="Prices")
    ]


def test_docx_entities_are_left_unexpanded() -> None:
    source = zipfile.ZipFile(io.BytesIO(docx_bytes([("Normal", "PLACEHOLDER")])))
    document = source.read("word/document.xml").decode()
    declaration, body = document.split("?>", 1)
    doctype = '<!DOCTYPE w:document [<!ENTITY secret SYSTEM "file:///etc/hostname"><!ENTITY echo "ECHO">]>'
    entries = {entry.filename: source.read(entry) for entry in source.infolist()}
    entries["word/document.xml"] = f"{declaration}?>{doctype}{body}".replace(
        "PLACEHOLDER", "&secret;&echo;"
    ).encode()

    assert extract(zip_bytes(entries), sniffing.DOCX) == []


def test_zip_bomb_is_refused_before_it_expands() -> None:
    bomb = zip_bomb_docx_bytes()
    assert detect(bomb, "report.docx") == sniffing.DOCX

    started = time.monotonic()
    reason = extraction_failure(bomb, sniffing.DOCX)

    assert time.monotonic() - started < 1
    assert reason == "the document expands to 300 MB, more than the 200 MB allowed (a zip bomb?)"


def test_highly_compressed_part_is_refused() -> None:
    source = zipfile.ZipFile(io.BytesIO(docx_bytes([("Normal", "Hi")])))
    output = io.BytesIO()
    with zipfile.ZipFile(output, "w", zipfile.ZIP_DEFLATED) as document:
        for entry in source.infolist():
            document.writestr(entry, source.read(entry))
        document.writestr("word/media/zeros.bin", bytes(20 * 1024 * 1024))

    reason = extraction_failure(output.getvalue(), sniffing.DOCX)

    assert reason.startswith("the document's part word/media/zeros.bin expands ")
    assert reason.endswith(" times, more than the 100 allowed (a zip bomb?)")


def test_html_sections_split_at_headings_without_scripts() -> None:
    page = b"""<!doctype html><html><head><title>Field guide</title>
    <style>p { color: red }</style><script>alert("hi")</script></head>
    <body><p>Welcome.</p><h1>Capybaras</h1><p>They swim.</p><h2>Diet</h2><p>Grass.</p></body></html>"""

    sections = extract(page, sniffing.HTML)

    assert sections == [
        Section(text="Welcome.", page=None, heading="Field guide"),
        Section(text="# Capybaras\n\nThey swim.", page=None, heading="Capybaras"),
        Section(text="## Diet\n\nGrass.", page=None, heading="Diet"),
    ]


def test_markdown_sections_split_at_atx_headings_outside_code() -> None:
    text = b"Intro line.\n\n# First\nBody one.\n```sh\n# not a heading\n```\n## Second ##\nBody two.\n"

    sections = extract(text, sniffing.MARKDOWN)

    assert sections == [
        Section(text="Intro line.", page=None, heading=""),
        Section(text="# First\nBody one.\n```sh\n# not a heading\n```", page=None, heading="First"),
        Section(text="## Second ##\nBody two.", page=None, heading="Second"),
    ]


def test_plain_text_is_one_section_decoded_from_utf16() -> None:
    sections = extract("Caf\u00e9 au lait\nsecond line\n".encode("utf-16"), sniffing.PLAIN_TEXT)

    assert sections == [Section(text="Caf\u00e9 au lait\nsecond line", page=None, heading="")]


def test_text_that_is_not_utf8_is_read_as_windows_1252() -> None:
    sections = extract("caf\u00e9 \u20ac5".encode("cp1252") + b"\x81", sniffing.PLAIN_TEXT)

    assert sections == [Section(text="caf\u00e9 \u20ac5\ufffd", page=None, heading="")]


def test_utf8_with_bom_loses_its_bom() -> None:
    sections = extract(codecs.BOM_UTF8 + "na\u00efve".encode(), sniffing.PLAIN_TEXT)

    assert sections == [Section(text="na\u00efve", page=None, heading="")]


def test_csv_rows_become_named_lines_in_blocks() -> None:
    rows = "name,city\n" + "".join(f"person {number},Town {number}\n" for number in range(1, 53))

    sections = extract(rows.encode(), sniffing.CSV)

    assert [section.heading for section in sections] == ["rows 1-50", "rows 51-52"]
    assert sections[0].text.splitlines()[0] == "name: person 1; city: Town 1"
    assert sections[1].text == "name: person 51; city: Town 51\nname: person 52; city: Town 52"


def test_csv_with_too_many_rows_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("files.extraction.MAX_CSV_ROWS", 2)

    reason = extraction_failure(b"a,b\n1,2\n3,4\n5,6\n", sniffing.CSV)

    assert reason == "the CSV has more than 2 rows, more than Agentry reads"


def test_json_is_pretty_printed() -> None:
    sections = extract(b'{"name":"alice","pets":["capybara"]}', sniffing.JSON)

    assert sections == [
        Section(text='{\n  "name": "alice",\n  "pets": [\n    "capybara"\n  ]\n}', page=None, heading="")
    ]


def test_text_postgresql_cannot_store_is_read_with_replacement_characters() -> None:
    sections = extract(rb'{"note": "a\u0000b", "half": "\ud800"}', sniffing.JSON)

    # JSON writes control characters as escapes; half a surrogate pair it writes as it is.
    expected = '{\n  "note": "a\\u0000b",\n  "half": "\ufffd"\n}'
    assert sections == [Section(text=expected, page=None, heading="")]


def test_invalid_json_is_refused() -> None:
    reason = extraction_failure(b'{"name": ', sniffing.JSON)

    assert reason == "the JSON could not be parsed: Expecting value: line 1 column 10 (char 9)"


def test_images_have_no_text() -> None:
    assert extract(png_bytes(2, 2), sniffing.PNG) == []


def test_too_much_text_is_refused() -> None:
    reason = extraction_failure(b"x" * (MAX_EXTRACTED_CHARACTERS + 1), sniffing.PLAIN_TEXT)

    assert reason == (
        "the document holds more than 5,000,000 characters of text, more than Agentry reads "
        "from one file: split it into smaller files"
    )


def test_chunks_overlap_within_a_section() -> None:
    sentences = [f"Sentence number {number} talks about capybaras." for number in range(1, 41)]
    section = Section(text=" ".join(sentences), page=3, heading="")

    chunks = chunk_sections([section], target_characters=300, overlap_characters=60)

    assert len(chunks) > 1
    assert all(len(chunk.text) <= 300 for chunk in chunks)
    for previous, chunk in itertools.pairwise(chunks):
        overlap = chunk.text[: chunk.text.index("Sentence number", 1)].strip()
        assert overlap
        assert previous.text.endswith(overlap)
    every_sentence_whole = all(any(sentence in chunk.text for chunk in chunks) for sentence in sentences)
    assert every_sentence_whole


def test_chunks_never_span_two_pages() -> None:
    sections = [
        Section(text="Short page one.", page=1, heading=""),
        Section(text="   \n ", page=2, heading=""),
        Section(text="Short page three.", page=3, heading=""),
    ]

    chunks = chunk_sections(sections)

    assert [(chunk.ordinal, chunk.text, chunk.page) for chunk in chunks] == [
        (0, "Short page one.", 1),
        (1, "Short page three.", 3),
    ]


def test_chunks_split_at_paragraphs_first() -> None:
    first, second = "a" * 80 + ".", "b" * 80 + "."
    section = Section(text=f"{first}\n\n{second}", page=None, heading="Notes")

    chunks = chunk_sections([section], target_characters=120, overlap_characters=0)

    assert [(chunk.text, chunk.heading) for chunk in chunks] == [(first, "Notes"), (second, "Notes")]


def test_a_word_longer_than_a_chunk_is_cut_hard() -> None:
    section = Section(text="z" * 250, page=None, heading="")

    chunks = chunk_sections([section], target_characters=100, overlap_characters=0)

    assert [len(chunk.text) for chunk in chunks] == [100, 100, 50]


def test_overlap_must_be_smaller_than_target() -> None:
    with pytest.raises(ValueError):
        chunk_sections([], target_characters=100, overlap_characters=100)

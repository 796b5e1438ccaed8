"""Sections cut into chunks small enough to embed and cite.

A chunk holds text of one section only, so it never spans two pages and a citation can
name one page or heading. Cuts fall between paragraphs where possible, then between
sentences, then anywhere; each chunk after the first of a section starts with the tail
of the one before, so a sentence cut in two is still found whole in one of them.
"""

import re
from collections.abc import Iterator
from dataclasses import dataclass

from files.extraction import Section

PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")
PARAGRAPH_SEPARATOR = "\n\n"
SENTENCE_SEPARATOR = " "


@dataclass(frozen=True)
class ChunkText:
    ordinal: int
    text: str
    page: int | None
    heading: str


@dataclass(frozen=True)
class _Piece:
    """A paragraph, sentence or fragment, with what joins it to the text before it."""

    text: str
    separator: str


def chunk_sections(
    sections: list[Section], *, target_characters: int = 1200, overlap_characters: int = 150
) -> list[ChunkText]:
    """Chunks of at most about ``target_characters``, numbered from 0 in document order."""
    if not 0 <= overlap_characters < target_characters:
        raise ValueError("overlap_characters must be at least 0 and less than target_characters")
    chunks: list[ChunkText] = []
    for section in sections:
        for text in _section_chunks(section.text, target_characters, overlap_characters):
            chunks.append(
                ChunkText(ordinal=len(chunks), text=text, page=section.page, heading=section.heading)
            )
    return chunks


def _section_chunks(text: str, target: int, overlap: int) -> Iterator[str]:
    # A piece must fit beside the overlap and a separator, or a chunk could hold nothing new.
    limit = target - overlap - len(PARAGRAPH_SEPARATOR) if overlap else target
    pieces = _pieces(text, max(limit, 1))
    chunk = ""
    for piece in pieces:
        if not chunk:
            chunk = piece.text
        elif len(chunk) + len(piece.separator) + len(piece.text) <= target:
            chunk += piece.separator + piece.text
        else:
            yield chunk
            tail = _tail(chunk, overlap)
            chunk = tail + piece.separator + piece.text if tail else piece.text
    if chunk:
        yield chunk


def _pieces(text: str, limit: int) -> Iterator[_Piece]:
    """The text's paragraphs, each no longer than ``limit`` once cut at sentences or hard."""
    for paragraph in PARAGRAPH_BREAK.split(text):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        separator = PARAGRAPH_SEPARATOR
        if len(paragraph) <= limit:
            yield _Piece(paragraph, separator)
            continue
        for sentence in SENTENCE_END.split(paragraph):
            for fragment in _hard_split(sentence, limit):
                yield _Piece(fragment, separator)
                separator = SENTENCE_SEPARATOR


def _hard_split(text: str, limit: int) -> Iterator[str]:
    """Cut at the last space before ``limit``, or at ``limit`` when a word is that long."""
    while len(text) > limit:
        cut = text.rfind(" ", 0, limit + 1)
        if cut <= limit // 2:
            cut = limit
        yield text[:cut].rstrip()
        text = text[cut:].lstrip()
    if text:
        yield text


def _tail(text: str, length: int) -> str:
    """The last ``length`` characters of ``text`` at most, starting at a word."""
    if length == 0:
        return ""
    tail = text[-length:]
    if len(text) > length and not text[-length - 1].isspace():
        space = re.search(r"\s", tail)
        tail = tail[space.end() :] if space else tail
    return tail.strip()

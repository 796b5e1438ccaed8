"""Readable text from HTML with the standard library's parser: what a person would read.

Scripts, styles and other non-content elements are dropped; headings become ``#`` lines,
list items ``-`` lines, and links keep their text with their absolute URL, Markdown-style.
"""

import re
from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import urljoin

SKIPPED_ELEMENTS = frozenset(
    {"script", "style", "noscript", "template", "svg", "math", "iframe", "object", "canvas", "select"}
)
BLOCK_ELEMENTS = frozenset(
    {
        "address", "article", "aside", "blockquote", "details", "dialog", "dd", "div", "dl", "dt",
        "fieldset", "figcaption", "figure", "footer", "form", "header", "hr", "main", "nav", "ol",
        "p", "pre", "section", "summary", "table", "tbody", "thead", "tfoot", "tr", "ul", "caption",
    }
)  # fmt: skip
HEADING_LEVELS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_WHITESPACE = re.compile(r"\s+")
_BLANK_LINES = re.compile(r"\n{3,}")


@dataclass(frozen=True)
class ExtractedPage:
    title: str
    text: str


def html_to_text(html: str, *, base_url: str = "") -> ExtractedPage:
    parser = _TextExtractor(base_url)
    parser.feed(html)
    parser.close()
    return ExtractedPage(title=parser.title, text=parser.text())


class _TextExtractor(HTMLParser):
    def __init__(self, base_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base_url = base_url
        self.parts: list[str] = []
        self.skip_depth = 0
        self.pre_depth = 0
        self.in_title = False
        self.title_parts: list[str] = []
        self.link_start: int | None = None
        self.link_href = ""

    @property
    def title(self) -> str:
        return _WHITESPACE.sub(" ", "".join(self.title_parts)).strip()

    def text(self) -> str:
        lines = (line.rstrip() for line in "".join(self.parts).split("\n"))
        return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
        elif tag == "base" and (href := dict(attrs).get("href")):
            self.base_url = urljoin(self.base_url, href)
        if tag in SKIPPED_ELEMENTS:
            self.skip_depth += 1
        if self.skip_depth:
            return
        if tag in HEADING_LEVELS:
            self._break(2)
            self.parts.append("#" * HEADING_LEVELS[tag] + " ")
        elif tag == "li":
            self._break(1)
            self.parts.append("- ")
        elif tag == "br":
            self.parts.append("\n")
        elif tag in {"td", "th"} and not self._after_whitespace():
            self.parts.append(" ")
        elif tag == "a":
            self.link_start = len(self.parts)
            self.link_href = dict(attrs).get("href") or ""
        elif tag in BLOCK_ELEMENTS:
            self._break(2 if tag in {"p", "pre", "table", "blockquote"} else 1)
        if tag == "pre":
            self.pre_depth += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        if tag in SKIPPED_ELEMENTS:
            self.skip_depth = max(0, self.skip_depth - 1)
            return
        if self.skip_depth:
            return
        if tag == "pre":
            self.pre_depth = max(0, self.pre_depth - 1)
        if tag == "a":
            self._close_link()
        elif tag in HEADING_LEVELS:
            self._break(2)
        elif tag in BLOCK_ELEMENTS or tag == "li":
            self._break(2 if tag in {"p", "pre", "table", "blockquote"} else 1)

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title_parts.append(data)
            return
        if self.skip_depth:
            return
        if self.pre_depth:
            self.parts.append(data)
            return
        text = _WHITESPACE.sub(" ", data)
        if self._after_whitespace():
            text = text.lstrip()
        if text:
            self.parts.append(text)

    def _close_link(self) -> None:
        if self.link_start is None:
            return
        start, href = self.link_start, self.link_href
        self.link_start, self.link_href = None, ""
        text = "".join(self.parts[start:]).strip()
        url = urljoin(self.base_url, href) if href else ""
        # In-page anchors ("#top") only add noise; other links keep where they lead.
        if text and not href.startswith("#") and url.startswith(("http://", "https://")) and url != text:
            self.parts[start:] = [f"[{text}]({url})"]

    def _after_whitespace(self) -> bool:
        for part in reversed(self.parts):
            if part:
                return part.endswith("\n") or part.endswith(" ")
        return True

    def _break(self, newlines: int) -> None:
        if self.link_start is not None:
            return  # a block inside a link stays on the link's line
        trailing = 0
        for part in reversed(self.parts):
            stripped = part.rstrip("\n")
            trailing += len(part) - len(stripped)
            if stripped:
                break
        if self.parts and trailing < newlines:
            self.parts.append("\n" * (newlines - trailing))

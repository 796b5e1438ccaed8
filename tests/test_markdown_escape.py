"""Text the platform puts into Markdown renders as written (core.markdown.markdown_escape)."""

import pytest
from markdown_it import MarkdownIt

from core.markdown import markdown_escape

# CommonMark with GitHub's tables and strikethrough, as the chat's renderer (marked, GFM) reads them.
RENDERER = MarkdownIt("commonmark").enable(["table", "strikethrough"])


def as_html_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


@pytest.mark.parametrize(
    "text",
    [
        # The README's plan demo: the two listed tasks, on two lines.
        "1. What is 6*7?\n2. What time is it?",
        "What is 6*7? [s1]: 6*7 = 42",
        "**bold** and __bold__, *it* and _it_",
        "# not a heading",
        "- not a list\n+ nor this\n* nor this",
        "3) not an ordered list",
        "> not a quote",
        "[not a link](https://example.com) ![nor an image](x.png)",
        "<script>alert(1)</script> <b>raw</b>",
        "a | b\n--- | ---\nc | d",
        "~~not struck~~",
        "&amp; stays &copy;",
        "`not code` and ```fences```",
        "a back\\slash \\* and a trailing one\\",
        "Setext?\n===",
        "report_final_v2.pdf",
    ],
)
def test_escaped_text_renders_as_written(text: str) -> None:
    rendered = RENDERER.render(markdown_escape(text))

    assert rendered == f"<p>{as_html_text(text)}</p>\n"


def test_text_without_markup_is_left_as_it_is() -> None:
    assert markdown_escape("What time is it? It is 10 past 2, on 2026-12-08.") == (
        "What time is it? It is 10 past 2, on 2026-12-08."
    )

"""Plain text placed in Markdown the platform composes: it shows as written, never as formatting.

People's words, tool output, file and agent names are text, not Markdown; where the platform puts
them into an answer or an export that is rendered as Markdown, it escapes them with
``markdown_escape`` (CommonMark lets any ASCII punctuation be escaped with a backslash).
"""

import re

# Characters that start emphasis, code, links, raw HTML, entities, tables or strikethrough anywhere.
_INLINE_MARKUP = re.compile(r"([\\`*_\[\]<>|~&])")
# Characters that start a heading, a quote, a list item or a setext underline at a line's start.
_LINE_MARKER = re.compile(r"^([ \t]*)([#>+=-])", re.MULTILINE)
# "1." or "1)" at a line's start: an ordered list item.
_ORDERED_MARKER = re.compile(r"^([ \t]*\d+)([.)])", re.MULTILINE)


def markdown_escape(text: str) -> str:
    """``text`` escaped so that Markdown renders it literally."""
    escaped = _INLINE_MARKUP.sub(r"\\\1", text)
    escaped = _LINE_MARKER.sub(r"\1\\\2", escaped)
    return _ORDERED_MARKER.sub(r"\1\\\2", escaped)

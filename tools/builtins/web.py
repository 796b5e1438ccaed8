"""The ``web`` group: ``web_fetch`` through the SSRF guard, and ``web_search`` over SearxNG.

``web_search`` exists only when ``WEB_SEARCH_SEARXNG_URL`` is set. That URL is the
administrator's configuration, not the model's input, so it is trusted and not passed
through the SSRF guard (a SearxNG on the private network is the usual setup).
"""

import json
from typing import Any

import httpx
from django.conf import settings

from core.ssrf import FetchedResponse, guarded_request
from tools.builtins.base import BuiltinTool, ToolContext, ToolError, register
from tools.builtins.html_text import html_to_text

DEFAULT_FETCH_MAX_BYTES = 2_000_000
DEFAULT_FETCH_MAX_CHARS = 20_000
DEFAULT_FETCH_TIMEOUT_SECONDS = 20.0
DEFAULT_SEARCH_TIMEOUT_SECONDS = 10.0
MAX_URL_LENGTH = 2048
ERROR_EXCERPT_CHARS = 300
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_APPLICATION_TYPES = frozenset(
    {"application/xml", "application/javascript", "application/x-javascript", "application/ecmascript"}
)


def fetch_max_bytes() -> int:
    return int(getattr(settings, "WEB_FETCH_MAX_BYTES", DEFAULT_FETCH_MAX_BYTES))


def fetch_max_chars() -> int:
    return int(getattr(settings, "WEB_FETCH_MAX_CHARS", DEFAULT_FETCH_MAX_CHARS))


def fetch_timeout_seconds() -> float:
    return float(getattr(settings, "WEB_FETCH_TIMEOUT_SECONDS", DEFAULT_FETCH_TIMEOUT_SECONDS))


def searxng_url() -> str:
    return str(getattr(settings, "WEB_SEARCH_SEARXNG_URL", "") or "")


# --- web_fetch ----------------------------------------------------------------------------


def run_web_fetch(arguments: dict[str, Any], context: ToolContext) -> str:
    response = guarded_request(
        "GET",
        arguments["url"],
        timeout_seconds=fetch_timeout_seconds(),
        max_bytes=fetch_max_bytes(),
        headers={"Accept": "text/html, application/xhtml+xml, application/json, text/*;q=0.9, */*;q=0.5"},
    )
    if response.status_code >= 400:
        excerpt = " ".join(response.text()[:ERROR_EXCERPT_CHARS].split())
        raise ToolError(
            f"HTTP {response.status_code} {response.reason_phrase} from {response.url}: {excerpt}"
        )
    title, text = readable_content(response)
    header = [f"URL: {response.url}", f"Status: {response.status_code}"]
    header.append(f"Content-Type: {response.content_type or 'unknown'}")
    if title:
        header.append(f"Title: {title}")
    if response.is_truncated:
        header.append(f"Note: only the first {fetch_max_bytes()} bytes of the body were read")
    return "\n".join(header) + "\n\n" + page_window(text, start_index=arguments.get("start_index", 0))


def readable_content(response: FetchedResponse) -> tuple[str, str]:
    """(title, text) of a response, or ToolError for content that is not text (images, PDFs…)."""
    content_type = response.content_type
    if content_type in HTML_TYPES or (not content_type and response.content.lstrip()[:1] == b"<"):
        page = html_to_text(response.text(), base_url=str(response.url))
        return page.title, page.text
    if content_type == "application/json" or content_type.endswith("+json"):
        text = response.text()
        try:
            return "", json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return "", text  # cut at the byte cap, or not really JSON: show it as it came
    if (
        content_type.startswith("text/")
        or content_type in TEXT_APPLICATION_TYPES
        or content_type.endswith("+xml")
        or (not content_type and b"\x00" not in response.content[:1024])
    ):
        return "", response.text()
    raise ToolError(f"{response.url} returned {content_type} content, which web_fetch cannot read as text")


def page_window(text: str, *, start_index: int) -> str:
    """Up to ``WEB_FETCH_MAX_CHARS`` characters from ``start_index``, saying how to read on."""
    limit = fetch_max_chars()
    if start_index >= len(text) > 0:
        raise ToolError(f"start_index {start_index} is past the end of the text ({len(text)} characters)")
    window = text[start_index : start_index + limit]
    end = start_index + len(window)
    if end < len(text):
        window += (
            f"\n\n[truncated: characters {start_index}-{end} of {len(text)}; "
            f"call web_fetch again with start_index={end} to read on]"
        )
    return window or "(empty page)"


register(
    BuiltinTool(
        name="web_fetch",
        group="web",
        description=(
            "Fetch a public web page or API over http(s) and return its readable text (HTML is converted "
            "to text with headings and links; JSON is pretty-printed). Long pages come in parts: pass "
            "start_index to continue. Private, loopback and cloud-metadata addresses are refused."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "url": {
                    "type": "string",
                    "description": "The absolute http:// or https:// URL to fetch.",
                    "minLength": 1,
                    "maxLength": MAX_URL_LENGTH,
                },
                "start_index": {
                    "type": "integer",
                    "description": "Character offset in the page's text to start from (default 0).",
                    "minimum": 0,
                },
            },
            "required": ["url"],
            "additionalProperties": False,
        },
        run=run_web_fetch,
        is_read_only=True,
        # The fetch has its own overall deadline; this outer bound also covers DNS and parsing.
        timeout_seconds=60.0,
    )
)


# --- web_search ---------------------------------------------------------------------------


def run_web_search(arguments: dict[str, Any], context: ToolContext) -> str:
    base_url = searxng_url()
    if not base_url:
        raise ToolError("web search is not configured")
    max_results = int(arguments.get("max_results", 5))
    timeout = float(getattr(settings, "WEB_SEARCH_TIMEOUT_SECONDS", DEFAULT_SEARCH_TIMEOUT_SECONDS))
    try:
        with httpx.Client(timeout=timeout, follow_redirects=True) as client:
            response = client.get(
                base_url.rstrip("/") + "/search", params={"q": arguments["query"], "format": "json"}
            )
    except httpx.TimeoutException:
        raise ToolError(f"the search backend did not answer within {timeout:g} s; try again") from None
    except httpx.TransportError as error:
        raise ToolError(
            f"the search backend is unreachable ({type(error).__name__}); try again later"
        ) from None
    if response.status_code == 403:
        raise ToolError(
            "the search backend refused JSON output (enable the json format in SearxNG's settings)"
        )
    if response.status_code >= 400:
        raise ToolError(f"the search backend answered HTTP {response.status_code}")
    try:
        payload = response.json()
    except ValueError:
        raise ToolError("the search backend did not answer with JSON") from None
    return format_search_results(arguments["query"], payload, max_results=max_results)


def format_search_results(query: str, payload: Any, *, max_results: int) -> str:
    if not isinstance(payload, dict):
        raise ToolError("the search backend answered with unexpected JSON")
    lines = [f"Answer: {answer}" for answer in _answers(payload)[:2]]
    results = [result for result in payload.get("results") or [] if isinstance(result, dict)]
    for number, result in enumerate(results[:max_results], start=1):
        lines.append(f"{number}. {result.get('title') or '(untitled)'}")
        lines.append(f"   {result.get('url', '')}")
        snippet = " ".join(str(result.get("content") or "").split())
        if snippet:
            lines.append(f"   {snippet[:500]}")
    if not results:
        lines.append(f"No results for {query!r}.")
    return "\n".join(lines)


def _answers(payload: dict[str, Any]) -> list[str]:
    # SearxNG gives answers as strings in older versions and as {"answer": …} objects in newer ones.
    answers = payload.get("answers") or []
    return [str(answer.get("answer", "")) if isinstance(answer, dict) else str(answer) for answer in answers]


register(
    BuiltinTool(
        name="web_search",
        group="web",
        description=(
            "Search the web. Returns numbered results with title, URL and a snippet; "
            "use web_fetch to read a result."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": "What to search for.",
                    "minLength": 1,
                    "maxLength": 500,
                },
                "max_results": {
                    "type": "integer",
                    "description": "How many results to return (default 5).",
                    "minimum": 1,
                    "maximum": 20,
                },
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        run=run_web_search,
        is_read_only=True,
        timeout_seconds=30.0,
        is_available=lambda: bool(searxng_url()),
        unavailable_reason=lambda: "" if searxng_url() else "WEB_SEARCH_SEARXNG_URL is not set",
    )
)

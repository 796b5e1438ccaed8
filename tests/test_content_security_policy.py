"""Every HTML page carries the Content-Security-Policy; the API docs page loads no inline script."""

import re
from typing import Any

import pytest

pytestmark = pytest.mark.django_db

POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self' ws://testserver; frame-ancestors 'none'; base-uri 'self'; "
    "form-action 'self'; object-src 'none'"
)


@pytest.mark.parametrize("path", ["/login/", "/admin/login/", "/api/v1/docs/", "/no-such-page/"])
def test_every_html_page_carries_the_policy(client: Any, path: str) -> None:
    response = client.get(path)

    assert response["Content-Type"].startswith("text/html")
    assert response["Content-Security-Policy"] == POLICY


def test_a_json_answer_carries_no_policy(client: Any) -> None:
    response = client.get("/api/v1/agents/")

    assert response["Content-Type"] == "application/json"
    assert "Content-Security-Policy" not in response


def test_a_page_over_https_allows_its_secure_websocket(client: Any) -> None:
    response = client.get("/login/", secure=True)

    assert "connect-src 'self' wss://testserver;" in response["Content-Security-Policy"]


def test_the_api_docs_page_has_no_inline_script_or_style(client: Any) -> None:
    page = client.get("/api/v1/docs/").content.decode()
    script = client.get("/api/v1/docs/?script=")

    assert re.findall(r"<script(?![^>]*\ssrc=)[^>]*>", page) == []
    assert "<style" not in page and " style=" not in page
    assert '<script src="/api/v1/docs/?script="></script>' in page
    assert script.status_code == 200
    assert script["Content-Type"] == "application/javascript"
    assert "SwaggerUIBundle({" in script.content.decode()

"""Every form of the web UI, sent back with hostile values in each field in turn: never a 500.

The pages are fetched as tenant A's owner, their forms read from the HTML, and each form is posted
with its own values except one field, which gets each of ``HOSTILE_VALUES`` (empty, huge, not
text, not a number, not an id, markup, a repeated field). The forms that delete or revoke go last.
"""

from html.parser import HTMLParser
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from tests.conftest import Cast
from tests.tenant_objects import make_one_of_each

pytestmark = pytest.mark.django_db

HOSTILE_VALUES = [
    "",
    " ",
    "x" * 20_000,
    "\u00e9\u00e8\u4e2d\U0001f600",
    "a\x00b",
    "-1",
    "99999999999999999999999",
    "1e309",
    "NaN",
    "not-a-uuid",
    "00000000-0000-0000-0000-000000000000",
    "<script>alert(1)</script>",
    '{"a": [1, {"b": null}]}',
    '{"type": "object", "description": "a\\u0000b \\ud800"}',
    "[]",
]


class Forms(HTMLParser):
    """The POST forms of a page: action and fields with their current values."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict[str, Any]] = []
        self._select: str | None = None
        self._textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if tag == "form":
            method = values.get("method", "get").lower()
            self.forms.append(
                {"method": method, "action": values.get("action", ""), "fields": {}, "files": []}
            )
        if not self.forms:
            return
        fields = self.forms[-1]["fields"]
        name = values.get("name")
        if tag == "input" and name:
            kind = values.get("type", "text")
            if kind == "file":
                self.forms[-1]["files"].append(name)
            elif kind in ("checkbox", "radio"):
                if "checked" in values:
                    fields[name] = values.get("value", "on")
                else:
                    fields.setdefault(name, None)
            elif kind not in ("submit", "button"):
                fields[name] = values.get("value", "")
        elif tag == "select" and name:
            self._select = name
            fields[name] = None
        elif tag == "option" and self._select and (fields.get(self._select) is None or "selected" in values):
            fields[self._select] = values.get("value", "")
        elif tag == "textarea" and name:
            self._textarea = name
            fields[name] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self._select = None
        if tag == "textarea":
            self._textarea = None

    def handle_data(self, data: str) -> None:
        if self._textarea and self.forms:
            self.forms[-1]["fields"][self._textarea] += data


def page_forms(client: Client, path: str) -> list[tuple[str, dict[str, Any], list[str]]]:
    response = client.get(path)
    assert response.status_code < 500, path
    if response.status_code != 200 or "html" not in response.get("Content-Type", ""):
        return []
    parser = Forms()
    parser.feed(response.content.decode())
    return [
        (form["action"] or path, _sent_fields(form["fields"]), form["files"])
        for form in parser.forms
        if form["method"] == "post"
    ]


def _sent_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """What the browser sends: checked boxes and chosen options, not the CSRF token (the test
    client does not check it)."""
    return {
        name: value for name, value in fields.items() if value is not None and name != "csrfmiddlewaretoken"
    }


@pytest.fixture
def pages(cast: Cast, fake_model: Any) -> list[str]:
    objects = make_one_of_each(cast, model_provider="anthropic")
    agent, session, run, memory = objects.agent, objects.session, objects.run, objects.memory
    tool, server, knowledge_base = objects.tool, objects.server, objects.knowledge_base
    message = session.messages.order_by("created_at").first()
    assert message is not None
    return [
        "/",
        "/account/",
        "/agents/",
        "/agents/new/",
        f"/agents/{agent.pk}/",
        f"/agents/{agent.pk}/edit/",
        f"/agents/{agent.pk}/tools/",
        "/chat/",
        "/chat/new/",
        f"/chat/{session.pk}/",
        f"/chat/{session.pk}/messages/{message.pk}/",
        f"/runs/{run.pk}/",
        "/tools/",
        "/tools/new/",
        f"/tools/{tool.pk}/edit/",
        "/mcp/",
        "/mcp/new/",
        f"/mcp/{server.pk}/",
        f"/mcp/{server.pk}/edit/",
        "/memories/",
        "/memories/new/",
        f"/memories/{memory.pk}/edit/",
        "/knowledge/",
        "/knowledge/new/",
        f"/knowledge/{knowledge_base.pk}/",
        f"/knowledge/{knowledge_base.pk}/edit/",
        "/settings/",
        "/settings/limits/",
        "/audit/",
    ]


def hostile_versions(fields: dict[str, Any]) -> list[dict[str, Any]]:
    """The form as shown, then with one field at a time hostile, or sent twice."""
    one_bad = [{**fields, name: value} for name in fields for value in HOSTILE_VALUES]
    repeated = [{**fields, name: [fields[name], "second"]} for name in fields]
    return [dict(fields), *one_bad, *repeated]


DESTRUCTIVE = ("delete", "revoke", "remove", "sign-out", "logout", "tenant/")
# The distinct form actions the pages above show tenant A's owner (three members, one of each kind
# of object): a page that stops showing its form fails here rather than going untested.
FORMS_ON_THE_PAGES = 44


def test_no_form_answers_500_to_hostile_values(cast: Cast, pages: list[str]) -> None:
    client = Client(raise_request_exception=False)
    client.force_login(cast.alice)
    forms: dict[str, tuple[dict[str, Any], list[str]]] = {}
    for path in pages:
        for action, fields, files in page_forms(client, path):
            forms.setdefault(action, (fields, files))
    failures = []
    # Signing out goes last of all: after it every form would only redirect to the login page.
    ordered = sorted(
        forms, key=lambda action: (any(word in action for word in DESTRUCTIVE), "logout" in action)
    )
    for action in ordered:
        fields, files = forms[action]
        for data in hostile_versions(fields):
            uploads = {name: SimpleUploadedFile("x.txt", b"hello") for name in files}
            response = client.post(action, {**data, **uploads})
            if response.status_code >= 500:
                failures.append((action, {k: str(v)[:40] for k, v in data.items()}, response.status_code))
    assert failures == []
    assert len(forms) == FORMS_ON_THE_PAGES

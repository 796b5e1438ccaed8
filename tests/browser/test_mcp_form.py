"""Adding an MCP server in Chromium where stdio is off and the address is private: no stdio to
choose, and the network policy's reason on the page."""

from playwright.sync_api import Page, expect

from tests.browser.conftest import BROWSER_MARKS, sign_in
from tests.conftest import Cast

pytestmark = BROWSER_MARKS

REASON = (
    "refused: 10.255.255.1 is a private address; an operator can allow the host in MCP_ALLOWED_PRIVATE_HOSTS"
)


def test_an_admin_adding_a_private_server_sees_why_it_is_refused_and_no_stdio(page: Page, cast: Cast) -> None:
    sign_in(page, "alice@a.test", "alice-password")
    page.goto("/mcp/new/")
    transport = page.get_by_label("Transport")

    expect(transport.locator("option")).to_have_text(["Streamable HTTP", "SSE"])
    expect(page.get_by_label("Command")).to_have_count(0)
    page.get_by_label("Name").fill("local")
    page.get_by_label("URL").fill("http://10.255.255.1:9000/mcp")
    page.get_by_role("button", name="Add and check").click()

    page.wait_for_url("**/mcp/*/")
    expect(page.get_by_role("alert").filter(has_text="Last error:")).to_have_text(f"Last error: {REASON}")

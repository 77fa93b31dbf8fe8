"""An operator's tour of the admin console in a real browser (Chromium through playwright): log in,
create an agent, see its token once and not after a reload, push a file through the API, watch it reach
"indexed", search it in the playground. One test, one page: each step builds on the previous one."""

import json
import re
import urllib.request

from django.utils import timezone

from agents.models import Agent
from agents.services import agent_create
from indexing.models import IndexJob
from indexing.writes import file_ingest


NOTES = "# Trips\n\nWe flew to Lisbon in May and ate pastel de nata every morning.\n\n# Work\n\nThe launch moved to June."


def api_put(base_url: str, token: str, path: str, content: str) -> dict:
    request = urllib.request.Request(
        f"{base_url}/api/v1/files/{path}", data=content.encode(), method="PUT",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "text/markdown"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def test_operator_tour(logged_in, live_server, shot):
    page = logged_in
    assert page.locator("#dashboard").is_visible()
    shot(page, "02-dashboard")

    page.goto("/admin/agents/agent/add/")
    page.fill("#id_slug", "scout")
    page.fill("#id_name", "Scout")
    page.click("input[name=_save]")
    token_shown = page.locator("code.raw-token")
    token_shown.wait_for()
    token = token_shown.inner_text()
    assert re.fullmatch(r"mh_[A-Za-z0-9_-]{43}", token)
    assert page.locator("#token-table .token-row").count() == 1
    shot(page, "03-agent-token-shown-once")

    page.reload()
    assert page.locator("code.raw-token").count() == 0
    assert token not in page.content()
    assert page.locator(f"#token-table .token-row[data-prefix='{token[:11]}']").is_visible()
    shot(page, "04-agent-reloaded-token-gone")

    answer = api_put(live_server.url, token, "memory/2026-05-01.md", NOTES)
    assert answer["path"] == "memory/2026-05-01.md" and answer["job"]

    page.click("text=Files")  # the agent page's link to its files
    row = page.locator("#result_list tbody tr", has_text="memory/2026-05-01.md")
    for _ in range(30):  # tasks run eagerly here, so the first look normally finds it indexed
        if row.locator(".mh-state-indexed").count():
            break
        page.wait_for_timeout(500)
        page.reload()
    assert row.locator(".mh-state-indexed").is_visible()
    shot(page, "05-file-indexed")

    row.locator("a").first.click()
    assert page.locator("pre.mh-content").inner_text().count("Lisbon") == 1
    shot(page, "06-file-content")

    page.go_back()
    page.go_back()  # the agent's page
    page.click("text=Search playground")
    page.fill("#id_query", "pastel de nata")
    page.click("#playground-form input[type=submit]")
    first = page.locator("#search-results tr.search-result").first
    assert "ate pastel de nata every morning" in first.locator("pre.mh-snippet").inner_text()
    assert "memory/2026-05-01.md#L" in first.inner_text() and "keyword_rank" in first.inner_text()
    shot(page, "07-playground-search")

    # The agent keeps a copy of its notes (its vectors come from its own chunks), and another agent's job fails.
    file_ingest(agent=Agent.objects.get(slug="scout"), path="archive/2026-05-01.md", content=NOTES)
    archivist = agent_create(slug="archivist")
    IndexJob.objects.create(
        agent=archivist, trigger="sync", state="failed", finished_at=timezone.now(),
        error="embedding failed: 429 Too Many Requests (retries exhausted)",
    )
    page.goto("/admin/")
    assert page.locator("#card-files .mh-value").inner_text() == "2"
    assert page.locator("#card-chunks .mh-value").inner_text() == "4"
    assert page.locator("#card-cache .mh-value").inner_text() == "50 %"
    assert "429 Too Many Requests" in page.locator("#recent-failures").inner_text()
    shot(page, "08-dashboard")


def test_the_one_time_token_copies_with_one_click_and_revoke_asks_first(logged_in, live_server, shot):
    page = logged_in
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    page.goto("/admin/agents/agent/add/")
    page.fill("#id_slug", "copier")
    page.click("input[name=_save]")
    token = page.locator("code.raw-token").inner_text()

    page.click("button.mh-copy")
    page.locator("button.mh-copy", has_text="Copied").wait_for()
    assert page.evaluate("navigator.clipboard.readText()") == token
    shot(page, "01-token-copied")

    row = page.locator(f"#token-table .token-row[data-prefix='{token[:11]}']")
    row.locator("text=Revoke…").click()
    page.wait_for_url("**/revoke/")
    assert f"{token[:11]}…" in page.locator("#content-main").inner_text()
    shot(page, "02-revoke-question")
    page.click("text=No, take me back")
    page.wait_for_url("**/change/#tokens")
    row.locator(".mh-state-done", has_text="active").wait_for()

    row.locator("text=Revoke…").click()
    page.wait_for_url("**/revoke/")
    page.click("#confirm-revoke")
    page.wait_for_url("**/change/#tokens")
    row.locator(".mh-state-failed", has_text="revoked").wait_for()
    shot(page, "03-revoked")

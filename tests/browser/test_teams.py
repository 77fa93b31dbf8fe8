"""Two teams in a real browser: a viewer of one team and an admin of the other log in through the login
form; each sees only its own team's agents, files, counts and audit trail, gets a 404 for the other
team's pages, and only the admin can change anything."""

from indexing.writes import file_ingest
from tests.conftest import team_cast_build


def log_in(browser, live_server, username: str):
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1280, "height": 860})
    context.set_default_timeout(15_000)
    page = context.new_page()
    page.goto("/admin/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")
    return context, page


def test_a_viewer_and_an_admin_of_two_teams_each_see_only_their_team(browser, live_server, transactional_db, fake_embeddings, shot):
    cast = team_cast_build()
    file_ingest(agent=cast.red_handbook.agent, path="memory/red-policies.md", content="Red rules.")
    file_ingest(agent=cast.blue_agent.agent, path="memory/blue-plans.md", content="Blue plans.")
    red_agent, blue_agent = cast.red_handbook.agent, cast.blue_agent.agent

    for username, mine, theirs, other_agent, can_change in [
        ("red-viewer", ("red-handbook", "red-policies.md"), ("blue-agent", "blue-plans.md"), blue_agent, False),
        ("blue-admin", ("blue-agent", "blue-plans.md"), ("red-handbook", "red-policies.md"), red_agent, True),
    ]:
        context, page = log_in(browser, live_server, username)
        agents_card = page.locator("#card-agents .mh-value").inner_text()
        assert agents_card == ("2" if username.startswith("red") else "1")
        shot(page, f"{username}-01-dashboard")

        page.goto("/admin/agents/agent/")
        listing = page.locator("#result_list").inner_text()
        assert mine[0] in listing and theirs[0] not in listing
        shot(page, f"{username}-02-agents")

        page.goto("/admin/indexing/memoryfile/")
        listing = page.locator("#result_list").inner_text()
        assert mine[1] in listing and theirs[1] not in listing

        response = page.goto(f"/admin/agents/agent/{other_agent.pk}/change/")
        assert response.status == 404 and theirs[0] not in page.content()
        shot(page, f"{username}-03-other-team-404")

        own = red_agent if username.startswith("red") else blue_agent
        page.goto(f"/admin/agents/agent/{own.pk}/change/")
        assert (page.locator("input[name=_save]").count() > 0) is can_change
        assert (page.locator("#token-create-form").count() > 0) is can_change
        shot(page, f"{username}-04-own-agent")

        audit = page.goto("/admin/agents/auditevent/")
        if can_change:
            listing = page.locator("#result_list").inner_text()
            assert "blue-agent" in listing and "red-handbook" not in listing
        else:
            assert audit.status == 403  # the audit trail is for the team's admins
        context.close()

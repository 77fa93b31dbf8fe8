"""The usage page in a real browser: the charts are drawn (bars with a height), readable at a glance,
and an agent's own page is one click away. Screenshot: test-artifacts/browser/test_usage_charts-*.png."""

from datetime import timedelta

from django.utils import timezone

from agents.services import agent_create
from memoryhub.usage.models import SearchEvent, UsageHour
from memoryhub.usage.services import hour_floor


def test_usage_charts(logged_in, shot):
    page = logged_in
    now = hour_floor(timezone.now())
    scout = agent_create(slug="scout")
    other = agent_create(slug="archivist")
    for hours in range(0, 24 * 12):
        day_cycle = 1 + (hours % 24 < 10) * 6  # busier in the working hours
        UsageHour.objects.create(
            agent=scout, hour=now - timedelta(hours=hours), searches=day_cycle * 3, writes=day_cycle,
            chunks_embedded=day_cycle * 5, cache_hits=day_cycle * 2, failures=int(hours % 17 == 0),
            files=200 - hours // 6, bytes=(200 - hours // 6) * 4096,
        )
        UsageHour.objects.create(agent=other, hour=now - timedelta(hours=hours), searches=1, files=10, bytes=10_000)
    for n, took in enumerate([412.5, 96.0, 35.2]):
        SearchEvent.objects.create(agent=scout, mode="hybrid", results=n + 3, took_ms=took)

    page.goto("/admin/usage/")
    charts = page.locator("svg.mh-chart")
    assert charts.count() == 14
    first_bars = page.locator("#usage-hourly svg.mh-chart").first.locator("rect")
    assert first_bars.count() == 48
    assert max(float(first_bars.nth(i).get_attribute("height")) for i in range(48)) > 100  # the peak fills the chart
    box = page.locator("#usage-hourly svg.mh-chart").first.bounding_box()
    assert box["width"] > 400 and box["height"] >= 100  # visible, not collapsed by the admin's CSS
    assert page.locator("#usage-slowest tbody tr").first.inner_text().split("\t")[-1].strip() == "412.5 ms"
    shot(page, "01-all-agents")

    page.click("#usage-busiest a:text('scout')")
    page.wait_for_url("**/admin/usage/?agent=*")
    assert "Usage of scout" in page.locator("h1").inner_text()
    shot(page, "02-one-agent")

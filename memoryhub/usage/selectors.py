"""What the admin usage page reads: a fixed number of queries whatever the number of agents or searches."""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Sum
from django.utils import timezone

from agents.models import LIVE_AGENT, Agent
from memoryhub.usage.models import SearchEvent, UsageHour
from memoryhub.usage.services import hour_floor

DAYS = 30
HOURS = 48
SERIES = ["searches", "writes", "chunks_embedded", "cache_hits", "failures", "files", "bytes"]
# Stored files and bytes are levels, not counts: a day shows its highest hour, not a sum.
LEVELS = {"files", "bytes"}


@dataclass
class UsageOverview:
    agent: Agent | None
    hours: list[datetime]
    days: list[datetime]
    hourly: dict[str, list[int]] = field(default_factory=dict)
    daily: dict[str, list[int]] = field(default_factory=dict)
    slowest: list[SearchEvent] = field(default_factory=list)
    busiest: list[dict] = field(default_factory=list)


def usage_overview(
    *, agent: Agent | None = None, now: datetime | None = None, team_ids: frozenset[int] | None = None
) -> UsageOverview:
    """The charts and tables, of one agent, or of every agent of ``team_ids`` (None: of every team). An
    agent being deleted is left out: it is gone for its users, and its rows go with the deletion."""
    now = now or timezone.now()
    current = hour_floor(now)
    hours = [current - timedelta(hours=n) for n in range(HOURS - 1, -1, -1)]
    today = current.replace(hour=0)
    days = [today - timedelta(days=n) for n in range(DAYS - 1, -1, -1)]

    usage = UsageHour.objects.filter(LIVE_AGENT, hour__gte=days[0])
    if team_ids is not None:
        usage = usage.filter(agent__team__in=team_ids)
    if agent is not None:
        usage = usage.filter(agent=agent)
    # One row per hour of the 30 days (at most 720), summed over agents.
    per_hour = {item["hour"]: item for item in usage.values("hour").annotate(**{name: Sum(name) for name in SERIES})}
    overview = UsageOverview(agent=agent, hours=hours, days=days)
    for name in SERIES:
        overview.hourly[name] = [per_hour.get(hour, {}).get(name) or 0 for hour in hours]
        by_day = {day: 0 for day in days}
        for hour, item in per_hour.items():
            day = hour.replace(hour=0)
            if day in by_day:
                value = item[name] or 0
                by_day[day] = max(by_day[day], value) if name in LEVELS else by_day[day] + value
        overview.daily[name] = [by_day[day] for day in days]

    day_ago = now - timedelta(days=1)
    slowest = SearchEvent.objects.filter(LIVE_AGENT, created_at__gte=day_ago).select_related("agent").order_by("-took_ms")
    if team_ids is not None:
        slowest = slowest.filter(agent__team__in=team_ids)
    if agent is not None:
        slowest = slowest.filter(agent=agent)
    overview.slowest = list(slowest[:10])
    if agent is None:
        busiest = UsageHour.objects.filter(LIVE_AGENT, hour__gte=current - timedelta(hours=23))
        if team_ids is not None:
            busiest = busiest.filter(agent__team__in=team_ids)
        overview.busiest = list(
            busiest
            .values("agent_id", "agent__slug")
            .annotate(searches=Sum("searches"), writes=Sum("writes"), failures=Sum("failures"))
            .order_by("-searches", "-writes")[:10]
        )
    return overview

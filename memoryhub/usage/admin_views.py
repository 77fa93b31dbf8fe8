"""The admin's usage page (/admin/usage/): charts of the hourly counters, the slowest searches."""

from django.http import Http404
from django.template.response import TemplateResponse

from agents.admin_scoping import request_team_scope
from agents.models import Agent
from memoryhub.usage.charts import bar_chart
from memoryhub.usage.selectors import usage_overview

CHARTS = [
    ("searches", "Searches", ""),
    ("writes", "Files written", ""),
    ("chunks_embedded", "Chunks embedded", ""),
    ("cache_hits", "Embedding cache hits", ""),
    ("failures", "Failed indexing jobs", ""),
    ("files", "Files stored", ""),
    ("bytes", "Bytes stored", "bytes"),
]


def usage_view(request, *, admin_site):
    agent = None
    team_ids = request_team_scope(request).team_ids
    agents = Agent.objects.live() if team_ids is None else Agent.objects.live().filter(team__in=team_ids)
    raw = request.GET.get("agent", "")
    if raw:
        agent = agents.filter(pk=int(raw)).first() if raw.isdigit() else None
        if agent is None:
            raise Http404("No such agent.")  # another team's agent, or one being deleted: not there for this user
    overview = usage_overview(agent=agent, team_ids=team_ids)
    charts = [
        {
            "hourly": bar_chart(title=title, labels=overview.hours, values=overview.hourly[name], label_format="%d %b %H:00",
                                unit=unit, level=name in ("files", "bytes")),
            "daily": bar_chart(title=title, labels=overview.days, values=overview.daily[name], label_format="%d %b",
                               unit=unit, level=name in ("files", "bytes")),
        }
        for name, title, unit in CHARTS
    ]
    context = {
        **admin_site.each_context(request),
        "title": f"Usage of {agent.slug}" if agent else "Usage over time",
        "overview": overview,
        "charts": charts,
    }
    return TemplateResponse(request, "admin/usage/usage.html", context)

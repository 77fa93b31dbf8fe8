"""Usage over time: one row per search (kept two days, for the slowest searches and the hourly roll-up)
and per agent and hour the counters the admin charts read, so a usage page costs a fixed number of
queries however many agents and searches there are."""

from django.db import models
from django.utils import timezone

from agents.models import Agent


class SearchEvent(models.Model):
    """One search: who, when, how it ran and how long it took. Never the query text."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+", db_index=False)
    created_at = models.DateTimeField(default=timezone.now)
    mode = models.CharField(max_length=16)
    results = models.PositiveSmallIntegerField()
    took_ms = models.FloatField()

    class Meta:
        indexes = [
            # The roll-up's and the slowest-searches page's time range, and the pruning of old rows.
            models.Index(fields=["created_at"], name="searchevent_created_idx"),
            # One agent's rows: deleting an agent (two days of its searches) and its slowest searches.
            models.Index(fields=["agent", "created_at"], name="searchevent_agent_idx"),
        ]


class UsageHour(models.Model):
    """An agent's activity in one hour (`hour` is its start, UTC), written by the roll-up task."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+", db_index=False)
    hour = models.DateTimeField()
    searches = models.PositiveIntegerField(default=0)
    writes = models.PositiveIntegerField(default=0, help_text="Files created, changed or deleted.")
    chunks_embedded = models.PositiveIntegerField(default=0)
    cache_hits = models.PositiveIntegerField(default=0, help_text="Chunks whose vector was reused instead of embedded.")
    failures = models.PositiveIntegerField(default=0, help_text="Indexing jobs that failed.")
    files = models.PositiveIntegerField(default=0, help_text="Files stored when the hour was last rolled up.")
    bytes = models.PositiveBigIntegerField(default=0, help_text="Bytes stored when the hour was last rolled up.")

    class Meta:
        constraints = [
            # The roll-up's upsert target; its agent-first order also serves one agent's charts.
            models.UniqueConstraint(fields=["agent", "hour"], name="usagehour_agent_hour_uniq"),
        ]
        indexes = [
            # Every agent's hours of the last 30 days (the usage page without an agent selected).
            models.Index(fields=["hour"], name="usagehour_hour_idx"),
        ]

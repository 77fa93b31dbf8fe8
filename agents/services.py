"""Workflows that create or change agents and their tokens."""

import hashlib
import secrets
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from agents.models import DEFAULT_TEAM_SLUG, Agent, AgentToken, MemoryGrant, Team
from memoryhub.domain import InvalidInput

TOKEN_PREFIX = "mh_"
DISPLAY_PREFIX_LENGTH = 11  # "mh_" + 8 characters of the secret


def token_digest(raw_token: str) -> str:
    return hashlib.sha256(raw_token.encode()).hexdigest()


def team_create(*, slug: str, name: str = "") -> Team:
    return Team.objects.create(slug=slug, name=name or slug)


def team_default() -> Team:
    """The team agents join when none is named (created on first use, like the migration does)."""
    team, _ = Team.objects.get_or_create(slug=DEFAULT_TEAM_SLUG, defaults={"name": "Default team"})
    return team


def agent_create(*, slug: str, name: str = "", team: Team | None = None) -> Agent:
    return Agent.objects.create(slug=slug, name=name or slug, team=team or team_default())


def agent_token_create(
    *,
    agent: Agent,
    scopes: list[str] | None = None,
    label: str = "",
    expires_at: datetime | None = None,
) -> tuple[AgentToken, str]:
    """Create a token and return it with the raw value, which is never stored and cannot be shown again."""
    token = AgentToken(
        agent=agent,
        label=label,
        scopes=scopes or [AgentToken.Scope.READ, AgentToken.Scope.WRITE],
        expires_at=expires_at,
    )
    return token, agent_token_issue(token=token)


def agent_token_issue(*, token: AgentToken) -> str:
    """Give an unsaved token its secret, save it, and return the raw value (shown once, never stored)."""
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token.prefix = raw[:DISPLAY_PREFIX_LENGTH]
    token.digest = token_digest(raw)
    token.save()
    return raw


def agent_token_revoke(*, token: AgentToken) -> AgentToken:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token


def agent_tokens_revoke(*, agent: Agent, label: str) -> list[AgentToken]:
    """Revoke the agent's live tokens with this label; returns them."""
    tokens = list(AgentToken.objects.filter(agent=agent, label=label, revoked_at__isnull=True))
    for token in tokens:
        agent_token_revoke(token=token)
    return tokens


@transaction.atomic
def agent_token_rotate(*, token: AgentToken) -> tuple[AgentToken, str]:
    """Revoke a token and issue a replacement with the same label, scopes and expiry."""
    agent_token_revoke(token=token)
    return agent_token_create(agent=token.agent, scopes=token.scopes, label=token.label, expires_at=token.expires_at)


def memory_grant_give(*, reader: Agent, owner: Agent, approving_team_ids: frozenset[int] | None = None) -> MemoryGrant:
    """Let ``reader`` read ``owner``'s memory, approved for the sides of ``approving_team_ids`` (None: both
    sides, for an operator's command or a superuser). In one team one approval is the whole grant;
    across teams the grant works once both teams have approved it."""
    if reader.pk == owner.pk:
        raise InvalidInput("An agent always reads its own memory; a grant names two different agents.", code="invalid_grant")
    grant, _ = MemoryGrant.objects.get_or_create(reader=reader, owner=owner)
    return memory_grant_approve(grant=grant, approving_team_ids=approving_team_ids)


def memory_grant_approve(*, grant: MemoryGrant, approving_team_ids: frozenset[int] | None = None) -> MemoryGrant:
    everything = approving_team_ids is None
    if everything or grant.owner.team_id in approving_team_ids:
        grant.owner_team_approved = True
    if everything or grant.reader.team_id in approving_team_ids:
        grant.reader_team_approved = True
    grant.save(update_fields=["owner_team_approved", "reader_team_approved"])
    return grant


def memory_grant_revoke(*, reader: Agent, owner: Agent) -> bool:
    """Take the grant back; the reader's next request no longer sees the owner's memory. False if none."""
    deleted, _ = MemoryGrant.objects.filter(reader=reader, owner=owner).delete()
    return bool(deleted)

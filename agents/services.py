"""Workflows that create or change agents and their tokens."""

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from agents.models import DEFAULT_TEAM_SLUG, Agent, AgentToken, AuditEvent, MemoryGrant, Team, TeamMembership
from memoryhub.domain import InvalidInput, TooLarge

TOKEN_PREFIX = "mh_"
DISPLAY_PREFIX_LENGTH = 11  # "mh_" + 8 characters of the secret


@dataclass(frozen=True)
class Actor:
    """Who is acting, for the audit trail: a signed-in user with their address, an agent, or a command."""

    label: str
    user_id: int | None = None
    ip: str | None = None

    @classmethod
    def from_request(cls, request) -> "Actor":
        user = request.user
        # REMOTE_ADDR, as the login lockout reads it: behind a proxy, the proxy must pass the client's own.
        return cls(label=user.get_username(), user_id=user.pk, ip=request.META.get("REMOTE_ADDR") or None)


SYSTEM = Actor(label="system")


def audit_record(
    *, action: str, actor: Actor | None, team_ids, agent: Agent | None = None, target: str = "", **details
) -> AuditEvent:
    actor = actor or SYSTEM
    return AuditEvent.objects.create(
        action=action, actor=actor.label[:200], actor_user_id=actor.user_id, ip=actor.ip,
        team_ids=sorted({team_id for team_id in team_ids if team_id is not None}),
        agent_id=agent.pk if agent else None, agent_slug=agent.slug if agent else "", target=target[:300], details=details,
    )


def token_digest(raw_token: str) -> str:
    return hashlib.sha256(raw_token.encode()).hexdigest()


@transaction.atomic
def team_create(*, slug: str, name: str = "", actor: Actor | None = None) -> Team:
    team = Team.objects.create(slug=slug, name=name or slug)
    audit_record(action=AuditEvent.Action.TEAM_CREATED, actor=actor, team_ids=[team.pk], target=team.slug)
    return team


@transaction.atomic
def team_member_set(*, team: Team, user, role: str, actor: Actor | None = None) -> tuple[TeamMembership, str]:
    """Make ``user`` a member of ``team`` with ``role`` (added, or their role changed); audited as the
    admin's membership form is. Returns the membership and what happened: "added", "changed" or
    "unchanged"."""
    membership, created = TeamMembership.objects.select_for_update().get_or_create(
        team=team, user=user, defaults={"role": role}
    )
    username = user.get_username()
    if created:
        audit_record(action=AuditEvent.Action.MEMBER_ADDED, actor=actor, team_ids=[team.pk], target=username, role=role)
        return membership, "added"
    if membership.role == role:
        return membership, "unchanged"
    was, membership.role = membership.role, role
    membership.save(update_fields=["role"])
    audit_record(action=AuditEvent.Action.MEMBER_CHANGED, actor=actor, team_ids=[team.pk], target=username, role=role, was=was)
    return membership, "changed"


@transaction.atomic
def team_member_remove(*, team: Team, user, actor: Actor | None = None) -> bool:
    """Remove ``user`` from ``team``; False when they were not a member."""
    membership = TeamMembership.objects.select_for_update().filter(team=team, user=user).first()
    if membership is None:
        return False
    membership.delete()
    audit_record(
        action=AuditEvent.Action.MEMBER_REMOVED, actor=actor, team_ids=[team.pk], target=user.get_username(),
        role=membership.role,
    )
    return True


# The default team holds the agents from before teams, which had no team limits: it starts with none
# (0), so upgrading never refuses what worked before; a superuser can set some.
DEFAULT_TEAM_LIMITS = {"max_files": 0, "max_bytes": 0, "max_agents": 0, "rate_limit": "0"}


def team_default() -> Team:
    """The team agents join when none is named (created on first use, as the migration does)."""
    team, _ = Team.objects.get_or_create(slug=DEFAULT_TEAM_SLUG, defaults={"name": "Default team", **DEFAULT_TEAM_LIMITS})
    return team


@transaction.atomic
def agent_create(*, slug: str, name: str = "", team: Team | None = None, actor: Actor | None = None) -> Agent:
    team = team or team_default()
    team_agent_quota_check(team=team)
    agent = Agent.objects.create(slug=slug, name=name or slug, team=team)
    agent_created_record(agent=agent, actor=actor)
    return agent


def team_agent_quota_check(*, team: Team) -> None:
    """TooLarge when the team already has as many agents as its limit allows."""
    if team.agent_limit is None:
        return
    count = Agent.objects.live().filter(team=team).count()  # one being deleted is gone already
    if count >= team.agent_limit:
        raise TooLarge(
            f"Team {team.slug} has {count} agents, its limit (team_max_agents: {team.agent_limit}).",
            code="team_agent_quota_exceeded",
        )


def agent_created_record(*, agent: Agent, actor: Actor | None) -> None:
    """The audit event of a new agent (also for one saved by the admin's own form)."""
    audit_record(action=AuditEvent.Action.AGENT_CREATED, actor=actor, team_ids=[agent.team_id], agent=agent, target=agent.slug)


def agent_active_set(*, agent: Agent, was_active: bool, actor: Actor | None) -> None:
    """Record a deactivation (its tokens are refused from the next request) or a reactivation."""
    if agent.is_active != was_active:
        action = AuditEvent.Action.AGENT_REACTIVATED if agent.is_active else AuditEvent.Action.AGENT_DEACTIVATED
        audit_record(action=action, actor=actor, team_ids=[agent.team_id], agent=agent, target=agent.slug)


@transaction.atomic
def agent_delete(*, agent: Agent, actor: Actor | None) -> bool:
    """Delete an agent with its tokens, files and grants: mark it now (one short UPDATE; from the commit
    on it is gone for its users) and delete its rows in the background, in batches (agents/deletion.py).
    The audit trail keeps its slug and id. Asked again, it only publishes the task again (no second
    audit event). Returns True when this call marked it."""
    from indexing.recovery import agent_deletion_enqueue_on_commit

    now = timezone.now()
    marked = Agent.objects.live().filter(pk=agent.pk).update(deletion_requested_at=now)
    if marked:
        agent.deletion_requested_at = now
        audit_record(action=AuditEvent.Action.AGENT_DELETED, actor=actor, team_ids=[agent.team_id], agent=agent, target=agent.slug)
    agent_deletion_enqueue_on_commit(agent_id=agent.pk)
    return bool(marked)


def agent_token_create(
    *,
    agent: Agent,
    scopes: list[str] | None = None,
    label: str = "",
    expires_at: datetime | None = None,
    actor: Actor | None = None,
) -> tuple[AgentToken, str]:
    """Create a token and return it with the raw value, which is never stored and cannot be shown again."""
    token = AgentToken(
        agent=agent,
        label=label,
        scopes=scopes or [AgentToken.Scope.READ, AgentToken.Scope.WRITE],
        expires_at=expires_at,
    )
    return token, agent_token_issue(token=token, actor=actor)


def _token_target(token: AgentToken) -> str:
    return f"{token.prefix}… ({token.label or 'unlabelled'})"


@transaction.atomic
def agent_token_issue(*, token: AgentToken, actor: Actor | None = None, action: str = AuditEvent.Action.TOKEN_CREATED) -> str:
    """Give an unsaved token its secret, save it, and return the raw value (shown once, never stored)."""
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token.prefix = raw[:DISPLAY_PREFIX_LENGTH]
    token.digest = token_digest(raw)
    token.save()
    audit_record(
        action=action, actor=actor, team_ids=[token.agent.team_id], agent=token.agent, target=_token_target(token),
        scopes=list(token.scopes),
    )
    return raw


def agent_token_revoke(*, token: AgentToken, actor: Actor | None = None, audit: bool = True) -> AgentToken:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        if audit:
            audit_record(
                action=AuditEvent.Action.TOKEN_REVOKED, actor=actor, team_ids=[token.agent.team_id], agent=token.agent,
                target=_token_target(token),
            )
    return token


def agent_tokens_revoke(*, agent: Agent, label: str, actor: Actor | None = None) -> list[AgentToken]:
    """Revoke the agent's live tokens with this label; returns them."""
    tokens = list(AgentToken.objects.filter(agent=agent, label=label, revoked_at__isnull=True).select_related("agent"))
    for token in tokens:
        agent_token_revoke(token=token, actor=actor)
    return tokens


@transaction.atomic
def agent_token_rotate(*, token: AgentToken, actor: Actor | None = None) -> tuple[AgentToken, str]:
    """Revoke a token and issue a replacement with the same label, scopes and expiry (one audit event)."""
    agent_token_revoke(token=token, actor=actor, audit=False)
    replacement = AgentToken(agent=token.agent, label=token.label, scopes=token.scopes, expires_at=token.expires_at)
    raw = agent_token_issue(token=replacement, actor=actor, action=AuditEvent.Action.TOKEN_ROTATED)
    return replacement, raw


def agent_token_first_use(*, token: AgentToken, now: datetime, ip: str | None) -> bool:
    """Mark a token's first use, once even under concurrent first requests (the guarded UPDATE decides)."""
    if not AgentToken.objects.filter(pk=token.pk, last_used_at__isnull=True).update(last_used_at=now):
        return False
    audit_record(
        action=AuditEvent.Action.TOKEN_FIRST_USED, actor=Actor(label=f"agent {token.agent.slug}", ip=ip),
        team_ids=[token.agent.team_id], agent=token.agent, target=_token_target(token),
    )
    return True


def _grant_record(action: str, *, reader: Agent, owner: Agent, actor: Actor | None, **details) -> None:
    audit_record(
        action=action, actor=actor, team_ids=[reader.team_id, owner.team_id], agent=owner,
        target=f"{reader.slug} may read {owner.slug}", reader=reader.slug, reader_id=reader.pk, **details,
    )


@transaction.atomic
def memory_grant_give(
    *, reader: Agent, owner: Agent, approving_team_ids: frozenset[int] | None = None, actor: Actor | None = None
) -> MemoryGrant:
    """Let ``reader`` read ``owner``'s memory, approved for the sides of ``approving_team_ids`` (None: both
    sides, for an operator's command or a superuser). In one team one approval is the whole grant;
    across teams the grant works once both teams have approved it."""
    if reader.pk == owner.pk:
        raise InvalidInput("An agent always reads its own memory; a grant names two different agents.", code="invalid_grant")
    grant, created = MemoryGrant.objects.get_or_create(reader=reader, owner=owner)
    if not created:
        return memory_grant_approve(grant=grant, approving_team_ids=approving_team_ids, actor=actor)
    _approve_sides(grant, approving_team_ids)
    _grant_record(
        AuditEvent.Action.GRANT_GIVEN, reader=reader, owner=owner, actor=actor, active=grant.is_active,
    )
    return grant


def _approve_sides(grant: MemoryGrant, approving_team_ids: frozenset[int] | None) -> None:
    everything = approving_team_ids is None
    if everything or grant.owner.team_id in approving_team_ids:
        grant.owner_team_approved = True
    if everything or grant.reader.team_id in approving_team_ids:
        grant.reader_team_approved = True
    grant.save(update_fields=["owner_team_approved", "reader_team_approved"])


@transaction.atomic
def memory_grant_approve(
    *, grant: MemoryGrant, approving_team_ids: frozenset[int] | None = None, actor: Actor | None = None
) -> MemoryGrant:
    """Approve the grant for the sides (teams) the approver administers; None: both."""
    before = (grant.owner_team_approved, grant.reader_team_approved)
    _approve_sides(grant, approving_team_ids)
    if (grant.owner_team_approved, grant.reader_team_approved) != before:
        _grant_record(
            AuditEvent.Action.GRANT_APPROVED, reader=grant.reader, owner=grant.owner, actor=actor, active=grant.is_active
        )
    return grant


@transaction.atomic
def memory_grant_revoke(*, reader: Agent, owner: Agent, actor: Actor | None = None) -> bool:
    """Take the grant back; the reader's next request no longer sees the owner's memory. False if none."""
    deleted, _ = MemoryGrant.objects.filter(reader=reader, owner=owner).delete()
    if deleted:
        _grant_record(AuditEvent.Action.GRANT_REVOKED, reader=reader, owner=owner, actor=actor)
    return bool(deleted)

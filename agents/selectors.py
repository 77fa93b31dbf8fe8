"""Read-only queries over teams and their members."""

from dataclasses import dataclass

from agents.models import Agent, MemoryGrant, TeamMembership
from memoryhub.domain import InvalidInput, NotFound


@dataclass(frozen=True)
class TeamScope:
    """What one staff user may see and manage. ``everything`` for a superuser; otherwise the ids of the
    teams the user is a member of (``viewable``) and of those where the role is admin (``manageable``)."""

    everything: bool
    viewable: frozenset[int] = frozenset()
    manageable: frozenset[int] = frozenset()

    def can_view(self, team_id: int | None) -> bool:
        return self.everything or team_id in self.viewable

    def can_manage(self, team_id: int | None) -> bool:
        return self.everything or team_id in self.manageable

    @property
    def team_ids(self) -> frozenset[int] | None:
        """The teams to filter on, or None for no filter (a superuser)."""
        return None if self.everything else self.viewable


def user_team_scope(*, user) -> TeamScope:
    if user.is_superuser:
        return TeamScope(everything=True)
    if not user.is_authenticated or not user.is_active:
        return TeamScope(everything=False)
    roles = list(TeamMembership.objects.filter(user=user).values_list("team_id", "role"))
    return TeamScope(
        everything=False,
        viewable=frozenset(team_id for team_id, _ in roles),
        manageable=frozenset(team_id for team_id, role in roles if role == TeamMembership.Role.ADMIN),
    )


def agent_by_slug(*, slug: str, missing_ok: bool = False) -> Agent | None:
    """The agent an operator's command names. NotFound when there is none (None with ``missing_ok``) and
    when it is being deleted: a command never acts on an agent whose rows are going in the background."""
    agent = Agent.objects.select_related("team").filter(slug=slug).first()
    if agent is None:
        if missing_ok:
            return None
        raise NotFound(f"No agent {slug!r}.", code="not_found")
    if agent.is_being_deleted:
        raise NotFound(
            f"Agent {slug!r} is being deleted (since {agent.deletion_requested_at:%Y-%m-%d %H:%M} UTC); its slug is "
            "free once the deletion has finished.", code="agent_deleted",
        )
    return agent


# memory_search's scope: one agent's own memory (the default), or its own plus every memory granted to it,
# or a list of memory names (agent slugs: its own and granted ones).
SCOPE_OWN, SCOPE_SHARED = "own", "shared"
MAX_SCOPE_NAMES = 20


def memory_grants_readable(*, reader: Agent) -> dict[str, Agent]:
    """The memories granted to ``reader`` and approved on both sides, by owner slug. Read on every
    request that asks for them, so a revoked grant is gone from the next request on."""
    grants = MemoryGrant.objects.filter(
        reader=reader, owner_team_approved=True, reader_team_approved=True, owner__deletion_requested_at__isnull=True
    )
    return {grant.owner.slug: grant.owner for grant in grants.select_related("owner").order_by("owner__slug")}


def memory_scope_resolve(*, reader: Agent, scope) -> list[tuple[str | None, Agent]]:
    """The memories one search covers, as (owner slug, agent): owner None for the reader's own memory.
    A name that is neither the reader's nor granted to it is refused with the same words whether or not
    such an agent exists."""
    if scope in (None, SCOPE_OWN):
        return [(None, reader)]
    if scope == SCOPE_SHARED:
        return [(None, reader), *memory_grants_readable(reader=reader).items()]
    if not isinstance(scope, (list, tuple)) or not scope or not all(isinstance(name, str) for name in scope):
        raise InvalidInput(
            'scope must be "own", "shared" or a list of memory names (agent slugs).', code="invalid_request"
        )
    if len(scope) > MAX_SCOPE_NAMES:
        raise InvalidInput(f"scope names at most {MAX_SCOPE_NAMES} memories.", code="invalid_request")
    granted = memory_grants_readable(reader=reader)
    memories = []
    for name in dict.fromkeys(scope):
        if name == reader.slug:
            memories.append((None, reader))
        elif name in granted:
            memories.append((name, granted[name]))
        else:
            raise InvalidInput(f"No memory {name!r} is readable by this agent.", code="unknown_memory")
    return memories


def memory_prefix(path: str) -> tuple[str, str] | None:
    """(owner, rest) of a path written ``owner:rest`` (a colon before any slash), else None."""
    prefix, colon, rest = path.partition(":")
    return (prefix, rest) if colon and prefix and "/" not in prefix else None


def memory_path_resolve(*, reader: Agent, path: str) -> tuple[str | None, Agent, str]:
    """memory_get's path: ``owner:path`` reads a granted memory, anything else the reader's own.
    Returns (owner slug or None, agent, path within that agent's memory)."""
    named = memory_prefix(path)
    if named:
        prefix, rest = named
        if prefix == reader.slug:
            return None, reader, rest
        owner = memory_grants_readable(reader=reader).get(prefix)
        if owner is not None:
            return prefix, owner, rest
    return None, reader, path

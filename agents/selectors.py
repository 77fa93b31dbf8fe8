"""Read-only queries over teams and their members."""

from dataclasses import dataclass

from agents.models import TeamMembership


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

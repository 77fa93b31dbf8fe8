"""Every admin page sees only the signed-in user's teams.

A superuser sees everything. Any other staff user sees the rows of the teams they are a member of, may
change them where their role is admin, and gets a 404 for any other team's row, even by its id in the
URL: another team's objects are simply not there (not 403, which would say they exist). Django's model
permissions play no part for team members: the role decides.
"""

from functools import reduce
from operator import or_

from django.db.models import Q
from django.http import Http404

from agents.selectors import TeamScope, user_team_scope


def request_team_scope(request) -> TeamScope:
    """The user's scope, read once per request."""
    scope = getattr(request, "_memoryhub_team_scope", None)
    if scope is None:
        scope = user_team_scope(user=request.user)
        request._memoryhub_team_scope = scope
    return scope


class TeamScopedAdmin:
    """Mixin for a ModelAdmin whose rows belong to a team through ``team_field`` ("team", "agent__team",
    "pk" for the team itself), or to several teams through ``team_fields`` (a grant belongs to its
    reader's team and to its owner's). A row is seen when one of its teams is the user's, and acted on when
    the user administers one of them. ``view_role = "admin"`` shows a team's rows to its admins only (the
    audit trail); ``team_filter`` and ``team_ids_of`` are the two places that know where the teams are."""

    team_field = "agent__team"
    team_fields: tuple[str, ...] = ()
    view_role = "viewer"

    def _team_paths(self) -> tuple[str, ...]:
        return self.team_fields or (self.team_field,)

    def team_ids_of(self, obj) -> set[int]:
        ids = set()
        for team_path in self._team_paths():
            *hops, last = team_path.split("__")
            row = obj
            for hop in hops:
                row = getattr(row, hop)
            ids.add(row.pk if last == "pk" else getattr(row, f"{last}_id"))
        return ids

    def team_filter(self, team_ids) -> Q:
        """The rows that belong to one of ``team_ids``."""
        return reduce(or_, (Q(**{f"{team_path}__in": team_ids}) for team_path in self._team_paths()))

    def _seen_teams(self, scope) -> frozenset[int]:
        return scope.manageable if self.view_role == "admin" else scope.viewable

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        scope = request_team_scope(request)
        if not scope.everything:
            queryset = queryset.filter(self.team_filter(self._seen_teams(scope)))
        return queryset

    def managed(self, request, queryset):
        """The rows of ``queryset`` the user may act on (admin role), for actions."""
        scope = request_team_scope(request)
        if scope.everything:
            return queryset
        return queryset.filter(self.team_filter(scope.manageable))

    def may_view(self, request, obj) -> bool:
        scope = request_team_scope(request)
        return scope.everything or bool(self.team_ids_of(obj) & self._seen_teams(scope))

    def may_manage(self, request, obj) -> bool:
        scope = request_team_scope(request)
        return scope.everything or bool(self.team_ids_of(obj) & scope.manageable)

    def _may_manage_some(self, request) -> bool:
        scope = request_team_scope(request)
        return scope.everything or bool(scope.manageable)

    def has_module_permission(self, request):
        scope = request_team_scope(request)
        return scope.everything or bool(self._seen_teams(scope))

    def has_view_permission(self, request, obj=None):
        if obj is None:
            return self.has_module_permission(request)
        return self.may_view(request, obj)

    def has_change_permission(self, request, obj=None):
        return self._may_manage_some(request) if obj is None else self.may_manage(request, obj)

    def has_add_permission(self, request):
        return self._may_manage_some(request)

    def has_delete_permission(self, request, obj=None):
        return self._may_manage_some(request) if obj is None else self.may_manage(request, obj)

    def has_operate_permission(self, request):
        """For actions that change state (re-index, retry, revoke, approve): team admins and superusers."""
        return self._may_manage_some(request)

    def get_object(self, request, object_id, from_field=None):
        # Django answers a missing row with a redirect to the index ("does not exist"), or a 403 first
        # when the user may not change rows at all; for a team member any other team's row is a 404,
        # before any permission check. A superuser keeps Django's behaviour.
        obj = super().get_object(request, object_id, from_field)
        if obj is None and not request_team_scope(request).everything:
            raise Http404("No such object.")
        return obj

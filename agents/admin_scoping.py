"""Every admin page sees only the signed-in user's teams.

A superuser sees everything. Any other staff user sees the rows of the teams they are a member of, may
change them where their role is admin, and gets a 404 for any other team's row, even by its id in the
URL: another team's objects are simply not there (not 403, which would say they exist). Django's model
permissions play no part for team members: the role decides.
"""

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
    """Mixin for a ModelAdmin whose rows belong to a team through ``team_field`` ("team", "agent__team")."""

    team_field = "agent__team"

    def team_id_of(self, obj) -> int | None:
        *hops, last = self.team_field.split("__")
        for hop in hops:
            obj = getattr(obj, hop)
        return getattr(obj, f"{last}_id")

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        team_ids = request_team_scope(request).team_ids
        if team_ids is not None:
            queryset = queryset.filter(**{f"{self.team_field}__in": team_ids})
        return queryset

    def managed(self, request, queryset):
        """The rows of ``queryset`` the user may act on (admin role), for actions."""
        scope = request_team_scope(request)
        if scope.everything:
            return queryset
        return queryset.filter(**{f"{self.team_field}__in": scope.manageable})

    def has_module_permission(self, request):
        scope = request_team_scope(request)
        return scope.everything or bool(scope.viewable)

    def has_view_permission(self, request, obj=None):
        scope = request_team_scope(request)
        if obj is None:
            return scope.everything or bool(scope.viewable)
        return scope.can_view(self.team_id_of(obj))

    def has_change_permission(self, request, obj=None):
        scope = request_team_scope(request)
        if obj is None:
            return scope.everything or bool(scope.manageable)
        return scope.can_manage(self.team_id_of(obj))

    def has_add_permission(self, request):
        scope = request_team_scope(request)
        return scope.everything or bool(scope.manageable)

    def has_delete_permission(self, request, obj=None):
        return self.has_change_permission(request, obj)

    def has_operate_permission(self, request):
        """For actions that change state (re-index, retry, revoke): team admins and superusers."""
        scope = request_team_scope(request)
        return scope.everything or bool(scope.manageable)

    def get_object(self, request, object_id, from_field=None):
        # Django answers a missing row with a redirect to the index ("does not exist"), or a 403 first
        # when the user may not change rows at all; for a team member any other team's row is a 404,
        # before any permission check. A superuser keeps Django's behaviour.
        obj = super().get_object(request, object_id, from_field)
        if obj is None and not request_team_scope(request).everything:
            raise Http404("No such object.")
        return obj

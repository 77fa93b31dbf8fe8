"""Scope checks. Views declare ``required_scope = "read"`` or ``"write"`` (default: read)."""

from rest_framework import exceptions, permissions

from agents.models import Agent, AgentToken


class HasAgentToken(permissions.BasePermission):
    def has_permission(self, request, view) -> bool:
        if not isinstance(request.auth, AgentToken) or not isinstance(request.user, Agent):
            raise exceptions.NotAuthenticated("Send 'Authorization: Bearer <agent token>'.")
        scope = getattr(view, "required_scope", AgentToken.Scope.READ)
        if not request.auth.has_scope(scope):
            raise exceptions.PermissionDenied(f"This token lacks the '{scope}' scope.", code="insufficient_scope")
        return True

"""Scope checks, and the signature check of writes. Views declare ``required_scope = "read"`` or
``"write"`` (default: read); a write by an agent with a webhook secret must be signed (agents/signatures.py)."""

from django.conf import settings
from rest_framework import exceptions, permissions

from agents.models import Agent, AgentToken
from agents.signatures import SIGNATURE_HEADER, SignatureError, signature_verify


class InvalidSignature(exceptions.AuthenticationFailed):
    default_code = "invalid_signature"


class HasAgentToken(permissions.BasePermission):
    def has_permission(self, request, view) -> bool:
        if not isinstance(request.auth, AgentToken) or not isinstance(request.user, Agent):
            raise exceptions.NotAuthenticated("Send 'Authorization: Bearer <agent token>'.")
        scope = getattr(view, "required_scope", AgentToken.Scope.READ)
        if not request.auth.has_scope(scope):
            raise exceptions.PermissionDenied(f"This token lacks the '{scope}' scope.", code="insufficient_scope")
        if scope == AgentToken.Scope.WRITE and request.user.webhook_secret:
            write_signature_check(request)
        return True


def write_signature_check(request) -> None:
    """401 invalid_signature unless the request is signed with the agent's webhook secret."""
    try:
        signature_verify(
            secret=request.user.webhook_secret,
            header=request.headers.get(SIGNATURE_HEADER, ""),
            method=request.method,
            path=request.path,
            query=request.META.get("QUERY_STRING", ""),
            body=request.body,
            tolerance=settings.MEMORYHUB_WEBHOOK_TOLERANCE_SECONDS,
        )
    except SignatureError as exc:
        raise InvalidSignature(str(exc)) from None

"""Bearer-token authentication: every API request acts as the token's agent and nothing else.

``request.user`` is the Agent and ``request.auth`` the AgentToken. Malformed tokens are rejected
before the database is touched; digests are compared in constant time.
"""

import hmac
import re
from datetime import timedelta

from django.conf import settings
from django.utils import timezone
from rest_framework import authentication, exceptions

from agents.models import AgentToken
from agents.services import agent_token_first_use, token_digest

TOKEN_PATTERN = re.compile(r"^mh_[A-Za-z0-9_-]{43}$")


class AgentTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None  # the permission class turns this into 401 not_authenticated
        scheme, _, raw = header.partition(" ")
        raw = raw.strip()
        if scheme.lower() != "bearer" or not raw:
            raise exceptions.AuthenticationFailed("Use 'Authorization: Bearer <token>'.", code="invalid_token")
        return self.authenticate_token(raw, ip=request.META.get("REMOTE_ADDR"))

    def authenticate_token(self, raw: str, *, ip: str | None = None):
        """(agent, token) for a raw token from anywhere (the header, or /mcp/<token>), or AuthenticationFailed."""
        if not TOKEN_PATTERN.match(raw):
            raise exceptions.AuthenticationFailed("Malformed token: MemoryHub tokens start with 'mh_'.", code="invalid_token")
        digest = token_digest(raw)
        token = AgentToken.objects.select_related("agent__team").filter(digest=digest).first()
        # The unique-digest lookup already matched; compare again in constant time as a guard. An agent
        # being deleted (its rows go in the background) is already gone: its tokens are unknown, as after.
        if token is None or not hmac.compare_digest(token.digest, digest) or token.agent.is_being_deleted:
            raise exceptions.AuthenticationFailed("Unknown token.", code="invalid_token")
        if token.is_revoked:
            raise exceptions.AuthenticationFailed("This token has been revoked.", code="token_revoked")
        now = timezone.now()
        if token.is_expired(now):
            raise exceptions.AuthenticationFailed("This token has expired.", code="token_expired")
        if not token.agent.is_active:
            raise exceptions.AuthenticationFailed("This agent is deactivated.", code="agent_inactive")
        self._touch(token, now, ip=ip)
        return token.agent, token

    @staticmethod
    def _touch(token: AgentToken, now, *, ip: str | None) -> None:
        if token.last_used_at is None:
            agent_token_first_use(token=token, now=now, ip=ip)  # and the audit trail's "first used"
            token.last_used_at = now
            return
        interval = timedelta(seconds=settings.MEMORYHUB_TOKEN_LAST_USED_INTERVAL)
        if now - token.last_used_at >= interval:
            AgentToken.objects.filter(pk=token.pk).update(last_used_at=now)
            token.last_used_at = now

    def authenticate_header(self, request):
        return 'Bearer realm="memoryhub"'

"""Request rates per token (memoryhub/ratelimit.py): views name their bucket with ``rate_limit_bucket``
(``search``, ``write``, ``sync``); anything else is ``write`` for write-scoped views, ``read`` otherwise."""

from django.conf import settings
from rest_framework.throttling import BaseThrottle

from agents.models import AgentToken
from memoryhub.errors import ApiError
from memoryhub.ratelimit import Rate, rate_limit_hit


class RateLimited(ApiError):
    def __init__(self, *, bucket: str, rate: Rate, wait: float):
        super().__init__(
            status_code=429,
            code="rate_limited",
            message=f"Too many {bucket} requests for this token (at most {rate}). Retry in {wait:.0f} s.",
        )
        self.wait = max(1, round(wait))


def rate_limit_check(*, token: AgentToken, bucket: str) -> None:
    """RateLimited (429, Retry-After) when this token is past its ``bucket`` rate."""
    rate = settings.MEMORYHUB_RATE_LIMITS.get(bucket)
    wait = rate_limit_hit(bucket=bucket, subject=token.digest[:24], rate=rate)
    if wait is not None:
        raise RateLimited(bucket=bucket, rate=rate, wait=wait)


class TokenRateThrottle(BaseThrottle):
    def allow_request(self, request, view) -> bool:
        if not isinstance(request.auth, AgentToken):
            return True  # unauthenticated: the permission check answers 401
        bucket = getattr(view, "rate_limit_bucket", None)
        if bucket is None:
            bucket = "write" if getattr(view, "required_scope", "read") == AgentToken.Scope.WRITE else "read"
        rate_limit_check(token=request.auth, bucket=bucket)
        return True

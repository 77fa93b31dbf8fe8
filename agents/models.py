from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.core.validators import RegexValidator
from django.conf import settings
from django.db import models
from django.utils import timezone

# The team that existing agents were moved into, and that agents created without a team join.
DEFAULT_TEAM_SLUG = "default"


class Team(models.Model):
    """A tenant above agents: it owns agents, and its members (staff users) manage only those."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200, blank=True)
    # Limits of this team; blank = the server's default (MEMORYHUB_TEAM_* settings), 0 = no limit.
    max_files = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Files stored by all its agents together (blank: the default; 0: no limit)."
    )
    max_bytes = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Bytes stored by all its agents together (blank: the default; 0: no limit)."
    )
    max_agents = models.PositiveIntegerField(null=True, blank=True, help_text="Agents in the team (blank: the default; 0: no limit).")
    rate_limit = models.CharField(
        max_length=32, blank=True,
        help_text='Requests of all its agents together, e.g. "6000/min" (units s, min, hour, day; blank: the default; 0: no limit).',
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    @staticmethod
    def _limit(own: int | None, default: int) -> int | None:
        """The limit in force: the team's own, else the server's default; None when it is 0 (no limit)."""
        value = default if own is None else own
        return value or None

    @property
    def file_limit(self) -> int | None:
        return self._limit(self.max_files, settings.MEMORYHUB_TEAM_MAX_FILES)

    @property
    def byte_limit(self) -> int | None:
        return self._limit(self.max_bytes, settings.MEMORYHUB_TEAM_MAX_BYTES)

    @property
    def agent_limit(self) -> int | None:
        return self._limit(self.max_agents, settings.MEMORYHUB_TEAM_MAX_AGENTS)

    def clean(self):
        from django.core.exceptions import ImproperlyConfigured, ValidationError

        if self.rate_limit:
            try:
                self.request_rate
            except ImproperlyConfigured:
                raise ValidationError({"rate_limit": 'Write a rate such as "6000/min" (units s, min, hour, day), or 0 for none.'})

    @property
    def request_rate(self):
        """The team's Rate, or None for no limit."""
        from memoryhub.ratelimit import rate_parse

        if not self.rate_limit:
            return settings.MEMORYHUB_TEAM_RATE_LIMIT
        return rate_parse(self.rate_limit, name=f"team {self.slug} rate_limit")


class TeamMembership(models.Model):
    """A staff user's role in one team: admins manage its agents, tokens, grants and members; viewers read."""

    class Role(models.TextChoices):
        ADMIN = "admin", "Admin (manage agents, tokens, grants and members)"
        VIEWER = "viewer", "Viewer (read-only)"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="team_memberships")
    role = models.CharField(max_length=8, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team__slug", "user__username"]
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="teammembership_team_user_unique")]
        # The unique constraint's index serves "members of this team"; this one serves "teams of this
        # user", asked on every admin request.
        indexes = [models.Index(fields=["user", "team"], name="teammembership_user_team_idx")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


# Agents not being deleted: the only ones a token, a grant, a command or a new job may act on.
LIVE = models.Q(deletion_requested_at__isnull=True)
# Rows whose agent is not being deleted (a filter on any model with an ``agent`` foreign key).
LIVE_AGENT = models.Q(agent__deletion_requested_at__isnull=True)


class AgentQuerySet(models.QuerySet):
    def live(self):
        return self.filter(LIVE)

    def being_deleted(self):
        return self.filter(deletion_requested_at__isnull=False)


class Agent(models.Model):
    """One AI agent and the memory it pushes, in exactly one team. Every other row belongs to exactly one agent."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200, blank=True)
    # PROTECT: a team with agents cannot be deleted by accident (its agents' memory would go with it).
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="agents")
    is_active = models.BooleanField(default=True, help_text="Inactive agents' tokens are refused.")
    # When set, POST /api/v1/sync must carry X-MemoryHub-Signature: sha256=<HMAC of the body>.
    webhook_secret = models.CharField(max_length=128, blank=True)
    # Per-agent overrides of the chunking and search defaults, e.g. {"chunk_tokens": 256}.
    overrides = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Set when the agent's deletion was asked for (agents/deletion.py): from then on it is gone for its
    # users, and a background task deletes its rows in batches, the agent's own row last.
    deletion_requested_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = AgentQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]
        indexes = [
            # The stuck-work sweep's "deletions still pending": only the few agents being deleted.
            models.Index(
                fields=["deletion_requested_at"], name="agent_deletion_requested_idx",
                condition=models.Q(deletion_requested_at__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return self.slug

    @property
    def is_being_deleted(self) -> bool:
        return self.deletion_requested_at is not None

    # DRF treats request.user as the authenticated principal; for the API that is the agent.
    is_authenticated = True


class AgentToken(models.Model):
    """A bearer token for one agent. Only a SHA-256 digest and a display prefix are stored."""

    class Scope(models.TextChoices):
        READ = "read", "Read (search, memory_get, status)"
        WRITE = "write", "Write (upload, sync, delete)"

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="tokens", db_index=False)
    label = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, editable=False, help_text="First characters, to recognise a token.")
    digest = models.CharField(
        max_length=64, unique=True, editable=False, validators=[RegexValidator(r"^[0-9a-f]{64}$")]
    )
    scopes = ArrayField(models.CharField(max_length=8, choices=Scope.choices), default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at"]
        # Token lookup is by the unique digest (its own unique index); this one serves the admin's
        # "tokens of this agent" listing.
        indexes = [models.Index(fields=["agent", "-created_at"], name="agenttoken_agent_created_idx")]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.label or 'unlabelled'})"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    def is_expired(self, now=None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now or timezone.now())

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes


class MemoryGrant(models.Model):
    """The reader agent may search and read the owner agent's memory, never write it.

    In one team the team's admin (or an operator's command) gives it at once; across teams it takes effect
    only once both teams' admins have approved (``owner_team_approved`` and ``reader_team_approved``).
    Revoking deletes the row, so the next request of the reader no longer sees the owner's memory."""

    reader = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="grants_received")
    owner = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="grants_given", db_index=False)
    owner_team_approved = models.BooleanField(default=False)
    reader_team_approved = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["reader__slug", "owner__slug"]
        constraints = [
            # Its index, reader first, serves "the memories this reader may read", asked by every shared search.
            models.UniqueConstraint(fields=["reader", "owner"], name="memorygrant_reader_owner_unique"),
            models.CheckConstraint(condition=~models.Q(reader=models.F("owner")), name="memorygrant_not_self"),
        ]
        indexes = [
            # "Who may read this agent's memory": the owner's side of the admin.
            models.Index(fields=["owner"], name="memorygrant_owner_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.reader} may read {self.owner}"

    @property
    def is_active(self) -> bool:
        return self.owner_team_approved and self.reader_team_approved


class AuditEvent(models.Model):
    """Who did what, when, from where: tokens, grants, memberships, agents, re-index and retry actions.

    Never edited, and kept when what it names is deleted: the agent, team and user are stored as ids and
    labels, not foreign keys that would cascade or go null."""

    class Action(models.TextChoices):
        TEAM_CREATED = "team_created", "Team created"
        AGENT_CREATED = "agent_created", "Agent created"
        AGENT_DEACTIVATED = "agent_deactivated", "Agent deactivated"
        AGENT_REACTIVATED = "agent_reactivated", "Agent reactivated"
        AGENT_DELETED = "agent_deleted", "Agent deleted"
        TOKEN_CREATED = "token_created", "Token created"
        TOKEN_ROTATED = "token_rotated", "Token rotated"
        TOKEN_REVOKED = "token_revoked", "Token revoked"
        TOKEN_FIRST_USED = "token_first_used", "Token used for the first time"
        GRANT_GIVEN = "grant_given", "Grant given"
        GRANT_APPROVED = "grant_approved", "Grant approved"
        GRANT_REVOKED = "grant_revoked", "Grant revoked"
        MEMBER_ADDED = "member_added", "Member added"
        MEMBER_CHANGED = "member_changed", "Member's role changed"
        MEMBER_REMOVED = "member_removed", "Member removed"
        FILES_REINDEXED = "files_reindexed", "Files re-indexed"
        JOBS_RETRIED = "jobs_retried", "Jobs retried"

    created_at = models.DateTimeField(default=timezone.now)
    action = models.CharField(max_length=24, choices=Action.choices)
    actor = models.CharField(max_length=200, help_text="A username, 'agent <slug>', or the command that did it.")
    actor_user_id = models.BigIntegerField(null=True, blank=True)
    ip = models.GenericIPAddressField(null=True, blank=True, verbose_name="IP address")
    # Every team the event concerns (both sides of a cross-team grant): its admins see it.
    team_ids = ArrayField(models.BigIntegerField(), default=list)
    agent_id = models.BigIntegerField(null=True, blank=True)
    agent_slug = models.CharField(max_length=64, blank=True)
    target = models.CharField(max_length=300, blank=True, help_text="What was acted on: a token's prefix, a grant, a user.")
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # The admin's list for a team's admins: events whose team_ids overlap their teams.
            GinIndex(fields=["team_ids"], name="auditevent_team_ids_gin"),
            # The list's order, newest first.
            models.Index(fields=["-created_at"], name="auditevent_created_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.get_action_display()} by {self.actor}"

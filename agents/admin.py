from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.actions import delete_selected as django_delete_selected
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import models
from django.db.models.expressions import RawSQL
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_http_methods, require_POST

from agents.admin_scoping import TeamScopedAdmin, request_team_scope
from agents.models import Agent, AgentToken, AuditEvent, MemoryGrant, Team, TeamMembership
from agents.services import (
    DISPLAY_PREFIX_LENGTH,
    Actor,
    agent_active_set,
    agent_created_record,
    agent_delete,
    audit_record,
    agent_token_create,
    agent_token_issue,
    agent_token_revoke,
    agent_token_rotate,
    memory_grant_approve,
    memory_grant_give,
    memory_grant_revoke,
    team_agent_quota_check,
    team_default,
)
from memoryhub.domain import DomainError


def show_raw_token_once(request, *, agent: Agent, raw: str, what: str = "New token") -> None:
    """Put a raw token in a message. Messages live in the server-side session (MESSAGE_STORAGE) and are
    deleted once displayed, so the value appears on the next page only, never on a reload."""
    messages.warning(
        request,
        format_html(
            '{} for {}: <code class="raw-token" id="raw-token-{}">{}</code> '
            '<button type="button" class="button mh-copy" data-copy-target="raw-token-{}">Copy</button>'
            " — copy it now; it will not be shown again.",
            what, agent.slug, raw[:DISPLAY_PREFIX_LENGTH], raw, raw[:DISPLAY_PREFIX_LENGTH],
        ),
    )


# Agent.overrides keys and their bounds, as indexing.services.chunk_sizes applies them (it ignores anything
# else): the form refuses what the indexer would ignore, so a typo is an error instead of a silent default.
OVERRIDE_KEYS = {"chunk_tokens": (32, 8000), "chunk_overlap": (0, 7999)}


def overrides_validate(value) -> dict:
    if value in (None, ""):
        return {}
    if not isinstance(value, dict):
        raise ValidationError('Overrides must be a JSON object, e.g. {"chunk_tokens": 256}.')
    unknown = sorted(set(value) - set(OVERRIDE_KEYS))
    if unknown:
        raise ValidationError(
            f"Unknown override key(s): {', '.join(unknown)}. Known keys: {', '.join(OVERRIDE_KEYS)}."
        )
    for key, (low, high) in OVERRIDE_KEYS.items():
        if key in value and (type(value[key]) is not int or not low <= value[key] <= high):
            raise ValidationError(f"{key} must be a whole number from {low} to {high} (got {value[key]!r}).")
    tokens = value.get("chunk_tokens", settings.MEMORYHUB_CHUNK_TOKENS)
    if "chunk_overlap" in value and value["chunk_overlap"] >= tokens:
        raise ValidationError(f"chunk_overlap ({value['chunk_overlap']}) must be smaller than chunk_tokens ({tokens}).")
    return value


class TokenCreateForm(forms.Form):
    label = forms.CharField(max_length=100, required=False)
    scopes = forms.MultipleChoiceField(
        choices=AgentToken.Scope.choices,
        initial=[AgentToken.Scope.READ, AgentToken.Scope.WRITE],
        widget=forms.CheckboxSelectMultiple,
    )
    expires_at = forms.DateTimeField(required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))


class AgentForm(forms.ModelForm):
    """The webhook secret is write-only: the page never sends it back to the browser. A blank field keeps
    the current secret; "clear" removes it."""

    webhook_secret = forms.CharField(
        required=False,
        max_length=128,
        strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="When set, POST /api/v1/sync must carry X-MemoryHub-Signature: sha256=<HMAC-SHA256 of the body>. "
        "Leave blank to keep the current secret.",
    )
    clear_webhook_secret = forms.BooleanField(required=False, label="Clear the webhook secret")

    class Meta:
        model = Agent
        fields = ["slug", "name", "team", "is_active", "webhook_secret", "overrides"]
        help_texts = {
            "overrides": "A JSON object; {} = the server's defaults. Keys: chunk_tokens (32–8000) and chunk_overlap "
            '(below chunk_tokens), e.g. {"chunk_tokens": 256}. Changed sizes apply when files are next indexed.',
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "team" in self.fields and not self.instance.pk:
            # A superuser may leave it blank for the default team; a team admin gets their teams only.
            self.fields["team"].required = False
            self.fields["team"].help_text = "Blank: the default team (or your only team)."
        has_secret = bool(self.instance.pk and self.instance.webhook_secret)
        self.fields["webhook_secret"].help_text = (
            ("A secret is set. " if has_secret else "No secret is set. ") + self.fields["webhook_secret"].help_text
        )

    def clean_overrides(self):
        return overrides_validate(self.cleaned_data.get("overrides"))

    def clean_slug(self):
        """An agent being deleted keeps its slug until its rows are gone (minutes for a large one): the
        audit trail, the admin's lists and its jobs name it by slug meanwhile, so no second agent may."""
        slug = self.cleaned_data.get("slug")
        taken = Agent.objects.being_deleted().filter(slug=slug).exclude(pk=self.instance.pk)
        if slug and taken.exists():
            raise ValidationError(
                f"An agent {slug!r} is being deleted in the background; its slug is free once the deletion "
                "has finished (the agent disappears from the list). Try again then, or choose another slug."
            )
        return slug

    def clean(self):
        cleaned = super().clean()
        if "team" in self.fields and not cleaned.get("team") and not self.instance.pk:
            choices = self.fields["team"].queryset
            cleaned["team"] = choices.first() if choices.count() == 1 else team_default()
            if not choices.filter(pk=cleaned["team"].pk).exists():
                self.add_error("team", "Choose one of your teams.")
        if not self.instance.pk and cleaned.get("team"):
            try:
                team_agent_quota_check(team=cleaned["team"])
            except DomainError as exc:
                self.add_error("team" if "team" in self.fields else None, exc.message)
        if cleaned.get("clear_webhook_secret"):
            cleaned["webhook_secret"] = ""
        elif not cleaned.get("webhook_secret"):
            cleaned["webhook_secret"] = self.instance.webhook_secret if self.instance.pk else ""
        return cleaned


@admin.register(Agent)
class AgentAdmin(TeamScopedAdmin, admin.ModelAdmin):
    form = AgentForm
    team_field = "team"
    list_display = [
        "slug", "name", "team", "is_active", "deletion", "files", "chunks", "pending", "failed_files", "active_jobs",
        "failed_jobs", "last_indexed", "created_at",
    ]
    list_filter = ["is_active", ("team", admin.RelatedOnlyFieldListFilter)]
    list_select_related = ["team"]
    search_fields = ["slug", "name"]
    readonly_fields = ["created_at"]

    # An agent being deleted stays in the list, marked, until its rows are gone (its counts shrink as the
    # background deletion goes): it can be looked at, not changed; deleting it again only re-sends the task.
    def has_change_permission(self, request, obj=None):
        if obj is not None and obj.is_being_deleted:
            return False
        return super().has_change_permission(request, obj)

    @admin.display(description="Deletion", ordering="deletion_requested_at")
    def deletion(self, agent):
        if not agent.is_being_deleted:
            return ""
        return format_html('<strong class="mh-deleting">being deleted</strong> since {}', agent.deletion_requested_at.strftime("%Y-%m-%d %H:%M UTC"))

    def get_readonly_fields(self, request, obj=None):
        # Moving an agent to another team moves its memory with it: a superuser's decision.
        if obj is not None and not request_team_scope(request).everything:
            return [*self.readonly_fields, "team"]
        return self.readonly_fields

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "team":
            scope = request_team_scope(request)
            if not scope.everything:
                kwargs["queryset"] = Team.objects.filter(pk__in=scope.manageable)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_queryset(self, request):
        from indexing.selectors import agent_index_annotate

        queryset = super().get_queryset(request)
        match = request.resolver_match
        if match is not None and match.url_name == "agents_agent_changelist":
            queryset = agent_index_annotate(queryset=queryset)  # the list's columns; not needed elsewhere
        return queryset

    # --- The list's columns (annotations: one query for the whole page) ---------------------------

    @staticmethod
    def _link(changelist: str, agent, count, **filters):
        """The count as a link to the agent's rows in another list (files or jobs), filtered."""
        query = "&".join([f"agent__id__exact={agent.pk}", *(f"{k}={v}" for k, v in filters.items())])
        return format_html('<a href="{}?{}">{}</a>', reverse(f"admin:{changelist}"), query, count)

    def _files_link(self, agent, count, **filters):
        return self._link("indexing_memoryfile_changelist", agent, count, **filters)

    def _jobs_link(self, agent, count, **filters):
        return self._link("indexing_indexjob_changelist", agent, count, **filters)

    @admin.display(description="Files", ordering="file_count")
    def files(self, agent):
        return self._files_link(agent, agent.file_count)

    @admin.display(description="Chunks", ordering="chunk_count")
    def chunks(self, agent):
        return agent.chunk_count

    @admin.display(description="Pending files", ordering="pending_count")
    def pending(self, agent):
        return self._files_link(agent, agent.pending_count, state__in="pending,indexing") if agent.pending_count else 0

    @admin.display(description="Failed files", ordering="failed_file_count")
    def failed_files(self, agent):
        return self._files_link(agent, agent.failed_file_count, state__exact="failed") if agent.failed_file_count else 0

    @admin.display(description="Queued jobs", ordering="active_job_count")
    def active_jobs(self, agent):
        return self._jobs_link(agent, agent.active_job_count, state__in="queued,running") if agent.active_job_count else 0

    @admin.display(description="Failed jobs", ordering="failed_job_count")
    def failed_jobs(self, agent):
        return self._jobs_link(agent, agent.failed_job_count, state__exact="failed") if agent.failed_job_count else 0

    @admin.display(description="Last indexed", ordering="last_indexed_at")
    def last_indexed(self, agent):
        return agent.last_indexed_at

    # --- Creating an agent issues its first token, shown once ---------------------------------------

    def save_model(self, request, obj, form, change):
        actor = Actor.from_request(request)
        was_active = Agent.objects.filter(pk=obj.pk).values_list("is_active", flat=True).first() if change else None
        super().save_model(request, obj, form, change)
        if change:
            agent_active_set(agent=obj, was_active=was_active, actor=actor)
        else:
            agent_created_record(agent=obj, actor=actor)
            _, raw = agent_token_create(agent=obj, label="created in the admin", actor=actor)
            show_raw_token_once(request, agent=obj, raw=raw, what="Read/write token")

    # --- Deleting agents: through agent_delete, confirmed on a page of bounded counts ------------------

    actions = ["delete_selected"]
    # "Delete selected" counts what goes with this many of the selected agents and names the others.
    DELETE_COUNTED_AGENTS = 100

    def get_deleted_objects(self, objs, request):
        """Django's version lists every row the delete cascades to (every chunk of the agent) and wants the
        delete permission of each row's admin, which the read-only file, job and batch admins refuse (403).
        What goes with an agent is agent_delete's business: the page shows, per agent, counts from bounded
        queries naming it (indexing.selectors.agent_holdings), and asks for permission to delete the agent."""
        from indexing.selectors import AGENT_HOLDINGS_COUNT_CAP as cap, agent_holdings

        agents = list(objs)
        perms_needed = {self.opts.verbose_name for agent in agents if not self.has_delete_permission(request, agent)}
        listed, totals, capped = [], {}, set()
        for agent in agents[: self.DELETE_COUNTED_AGENTS]:
            counts, uncounted = agent_holdings(agent_id=agent.pk, cap=cap)
            items = []
            for label, count in counts:
                items.append(f"{label}: {'more than ' if count > cap else ''}{min(count, cap):,}")
                totals[label] = totals.get(label, 0) + min(count, cap)
                if count > cap:
                    capped.add(label)
            if uncounted:
                items.append(f"its {', '.join(uncounted)}")
            url = reverse("admin:agents_agent_change", args=[agent.pk])
            listed += [format_html('Agent: <a href="{}">{}</a> (team {})', url, agent, agent.team), items]
        if len(agents) > self.DELETE_COUNTED_AGENTS:
            listed.append(f"and {len(agents) - self.DELETE_COUNTED_AGENTS} more agent(s), not counted here")
        model_count = {
            self.opts.verbose_name_plural: len(agents),
            **{label: f"{'more than ' if label in capped else ''}{total:,}" for label, total in totals.items()},
        }
        return listed, model_count, perms_needed, []

    @admin.action(permissions=["delete"], description=gettext_lazy("Delete selected %(verbose_name_plural)s"))
    def delete_selected(self, request, queryset):
        """Django's action, on the selected agents without the list's columns: the changelist's queryset
        counts every agent's files and chunks (get_queryset), which its confirmation page would run."""
        return django_delete_selected(self, request, Agent.objects.filter(pk__in=queryset.values("pk")).select_related("team"))

    def delete_model(self, request, obj):
        agent_delete(agent=obj, actor=Actor.from_request(request))
        request.agents_deletion_asked = [obj.slug]

    def delete_queryset(self, request, queryset):
        actor = Actor.from_request(request)
        agents = list(self.managed(request, queryset))
        for agent in agents:
            agent_delete(agent=agent, actor=actor)
        request.agents_deletion_asked = [agent.slug for agent in agents]

    def message_user(self, request, message, level=messages.INFO, *args, **kwargs):
        """Django's "deleted successfully" after a delete is not what happened yet: say what did."""
        asked = getattr(request, "agents_deletion_asked", None)
        if asked is not None and level == messages.SUCCESS:
            del request.agents_deletion_asked
            message = (
                f"Deletion of {', '.join(asked)} started: its tokens are refused from now on, and its files, chunks "
                "and jobs are deleted in the background (a large agent takes minutes). It is listed as being "
                "deleted until then."
            ) if len(asked) == 1 else (
                f"Deletion of {len(asked)} agents started ({', '.join(asked)}): their tokens are refused from now on, "
                "and their files, chunks and jobs are deleted in the background. They are listed as being deleted until then."
            )
        return super().message_user(request, message, level, *args, **kwargs)

    def response_add(self, request, obj, post_url_continue=None):
        # Straight to the agent's page, where its token is shown (once) and more can be made.
        messages.success(request, f"Agent {obj.slug} created.")
        return HttpResponseRedirect(reverse("admin:agents_agent_change", args=[obj.pk]))

    # --- The agent page: tokens and links -------------------------------------------------------

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = extra_context or {}
        agent = self.get_object(request, object_id)
        if agent is not None and agent.is_being_deleted and request.method == "GET":
            messages.warning(request, f"Agent {agent.slug} is being deleted in the background; it can no longer be changed.")
        if agent is not None:
            extra_context.update(
                tokens=AgentToken.objects.filter(agent=agent).order_by("revoked_at", "-created_at"),
                token_form=TokenCreateForm(),
                files_url=reverse("admin:indexing_memoryfile_changelist") + f"?agent__id__exact={agent.pk}",
                jobs_url=reverse("admin:indexing_indexjob_changelist") + f"?agent__id__exact={agent.pk}",
                search_url=reverse("admin:agents_agent_search", args=[agent.pk]),
                can_manage_tokens=self.has_change_permission(request, agent),  # a viewer only reads
            )
        return super().change_view(request, object_id, form_url, extra_context)

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path("<int:agent_id>/tokens/create/", wrap(self.token_create_view), name="agents_agent_token_create"),
            path(
                "<int:agent_id>/tokens/<int:token_id>/revoke/", wrap(self.token_revoke_view),
                name="agents_agent_token_revoke",
            ),
            path(
                "<int:agent_id>/tokens/<int:token_id>/rotate/", wrap(self.token_rotate_view),
                name="agents_agent_token_rotate",
            ),
            path("<int:agent_id>/search/", wrap(self.search_view), name="agents_agent_search"),
            *super().get_urls(),
        ]

    def _agent_for_change(self, request, agent_id) -> Agent:
        agent = get_object_or_404(self.get_queryset(request), pk=agent_id)
        if not self.has_change_permission(request, agent):
            raise PermissionDenied
        return agent

    def _back_to(self, agent):
        return HttpResponseRedirect(reverse("admin:agents_agent_change", args=[agent.pk]) + "#tokens")

    def token_create_view(self, request, agent_id):
        return require_POST(self._token_create)(request, agent_id)

    def _token_create(self, request, agent_id):
        agent = self._agent_for_change(request, agent_id)
        form = TokenCreateForm(request.POST)
        if not form.is_valid():
            errors = "; ".join(f"{field}: {' '.join(e)}" for field, e in form.errors.items())
            messages.error(request, f"No token created — {errors}")
            return self._back_to(agent)
        _, raw = agent_token_create(
            agent=agent, scopes=form.cleaned_data["scopes"], label=form.cleaned_data["label"],
            expires_at=form.cleaned_data["expires_at"], actor=Actor.from_request(request),
        )
        show_raw_token_once(request, agent=agent, raw=raw)
        return self._back_to(agent)

    # Revoke and Rotate ask first: the agent page links to a confirmation page (GET), whose button posts
    # back with confirmed=yes. A POST without it shows the confirmation page again and changes nothing.
    TOKEN_ACTIONS = {
        "revoke": "Clients using it are refused (401) from their next request. This cannot be undone.",
        "rotate": "It is revoked now (clients using it are refused from their next request) and a replacement "
        "with the same label, scopes and expiry is issued and shown once.",
    }

    def token_revoke_view(self, request, agent_id, token_id):
        return require_http_methods(["GET", "POST"])(self._token_confirm)(request, agent_id, token_id, "revoke")

    def token_rotate_view(self, request, agent_id, token_id):
        return require_http_methods(["GET", "POST"])(self._token_confirm)(request, agent_id, token_id, "rotate")

    def _token_confirm(self, request, agent_id, token_id, action):
        agent = self._agent_for_change(request, agent_id)
        token = get_object_or_404(AgentToken, pk=token_id, agent=agent)
        if token.is_revoked:
            messages.error(request, f"Token {token.prefix}… is already revoked; create a new one instead.")
            return self._back_to(agent)
        if request.method == "POST" and request.POST.get("confirmed") == "yes":
            return self._token_revoke(request, agent, token) if action == "revoke" else self._token_rotate(request, agent, token)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"{action.capitalize()} token {token.prefix}…?",
            "agent": agent,
            "token": token,
            "action": action,
            "consequence": self.TOKEN_ACTIONS[action],
        }
        return TemplateResponse(request, "admin/agents/agent/token_confirm.html", context)

    def _token_revoke(self, request, agent, token):
        agent_token_revoke(token=token, actor=Actor.from_request(request))
        messages.success(request, f"Token {token.prefix}… revoked: it is refused from now on.")
        return self._back_to(agent)

    def _token_rotate(self, request, agent, token):
        _, raw = agent_token_rotate(token=token, actor=Actor.from_request(request))
        show_raw_token_once(request, agent=agent, raw=raw, what=f"Replacement for {token.prefix}…")
        return self._back_to(agent)

    def search_view(self, request, agent_id):
        from search.admin_views import search_playground

        agent = get_object_or_404(self.get_queryset(request), pk=agent_id)
        if not self.has_view_permission(request, agent):
            raise PermissionDenied
        return search_playground(request, agent=agent, admin_site=self.admin_site, model_admin=self)


@admin.register(AgentToken)
class AgentTokenAdmin(TeamScopedAdmin, admin.ModelAdmin):
    list_display = ["prefix", "agent", "label", "scopes", "created_at", "last_used_at", "expires_at", "revoked_at"]
    list_select_related = ["agent"]
    list_filter = ["revoked_at"]
    search_fields = ["prefix", "label", "agent__slug"]
    raw_id_fields = ["agent"]
    readonly_fields = ["prefix", "digest", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke_selected"]

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "agent":
            scope = request_team_scope(request)
            agents = Agent.objects.live()
            kwargs["queryset"] = agents if scope.everything else agents.filter(team__in=scope.manageable)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["agent", "label", "scopes", "expires_at"]
        return ["agent", "label", "scopes", "expires_at", "prefix", "digest", "created_at", "last_used_at", "revoked_at"]

    def save_model(self, request, obj, form, change):
        if change:
            return super().save_model(request, obj, form, change)
        raw = agent_token_issue(token=obj, actor=Actor.from_request(request))
        show_raw_token_once(request, agent=obj.agent, raw=raw)

    @admin.action(description="Revoke selected tokens…", permissions=["operate"])
    def revoke_selected(self, request, queryset):
        """Asks first, like Django's "Delete selected": the confirmation page posts the action again with
        confirmed=yes."""
        live = list(self.managed(request, queryset).filter(revoked_at__isnull=True).select_related("agent"))
        if request.POST.get("confirmed") != "yes":
            context = {
                **self.admin_site.each_context(request),
                "opts": self.model._meta,
                "title": f"Revoke {len(live)} token(s)?",
                "tokens": live,
                "selected": request.POST.getlist(admin.helpers.ACTION_CHECKBOX_NAME),
                "consequence": AgentAdmin.TOKEN_ACTIONS["revoke"],
            }
            return TemplateResponse(request, "admin/agents/agenttoken/revoke_selected_confirm.html", context)
        actor = Actor.from_request(request)
        for token in live:
            agent_token_revoke(token=token, actor=actor)
        self.message_user(request, f"Revoked {len(live)} token(s).", messages.SUCCESS)


class TeamMembershipInline(admin.TabularInline):
    model = TeamMembership
    extra = 0
    raw_id_fields = ["user"]
    fields = ["user", "role", "created_at"]
    readonly_fields = ["created_at"]

    # The team's admins manage its members (the parent's change permission decides).
    def has_add_permission(self, request, obj=None):
        return obj is not None and request_team_scope(request).can_manage(obj.pk)

    def has_change_permission(self, request, obj=None):
        return obj is not None and request_team_scope(request).can_manage(obj.pk)

    def has_delete_permission(self, request, obj=None):
        return obj is not None and request_team_scope(request).can_manage(obj.pk)

    def has_view_permission(self, request, obj=None):
        return obj is None or request_team_scope(request).can_view(obj.pk)


@admin.register(Team)
class TeamAdmin(TeamScopedAdmin, admin.ModelAdmin):
    team_field = "pk"
    list_display = ["slug", "name", "agent_count", "created_at"]
    search_fields = ["slug", "name"]
    fields = ["slug", "name", "max_files", "max_bytes", "max_agents", "rate_limit", "limits", "created_at"]
    readonly_fields = ["limits", "created_at"]
    inlines = [TeamMembershipInline]

    @admin.display(description="Limits in force")
    def limits(self, team):
        if team.pk is None:
            return "The server's defaults, unless set above."
        saved = Team.objects.get(pk=team.pk)  # what is enforced, not a form's refused values
        rate = saved.request_rate
        def shown(limit, unit):
            return f"{limit} {unit}" if limit is not None else f"no limit on {unit}"

        return (
            f"{shown(saved.file_limit, 'files')}, {shown(saved.byte_limit, 'bytes')}, {shown(saved.agent_limit, 'agents')}, "
            f"{shown(rate, 'requests')} (a blank field: the server's default; 0: no limit)"
        )

    def get_queryset(self, request):
        from django.db.models import Count

        queryset = super().get_queryset(request)
        match = request.resolver_match
        if match is not None and match.url_name == "agents_team_changelist":
            queryset = queryset.annotate(agents_total=Count("agents"))
        return queryset

    @admin.display(description="Agents", ordering="agents_total")
    def agent_count(self, team):
        return format_html(
            '<a href="{}?team__id__exact={}">{}</a>', reverse("admin:agents_agent_changelist"), team.pk, team.agents_total
        )

    def get_readonly_fields(self, request, obj=None):
        # Limits are the service operator's: a team's admins see them, only a superuser changes them.
        if request_team_scope(request).everything:
            return self.readonly_fields
        return [*self.readonly_fields, "slug", "max_files", "max_bytes", "max_agents", "rate_limit"]

    # Teams are created and deleted by superusers (or `manage.py create_team`); team admins rename
    # theirs and manage its members.
    def has_add_permission(self, request):
        return request_team_scope(request).everything

    def has_delete_permission(self, request, obj=None):
        return request_team_scope(request).everything

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        if not change:
            audit_record(action=AuditEvent.Action.TEAM_CREATED, actor=Actor.from_request(request), team_ids=[obj.pk], target=obj.slug)

    def save_formset(self, request, form, formset, change):
        """Membership changes go to the audit trail: who added, removed or changed whose role."""
        actor = Actor.from_request(request)
        team = form.instance
        before = {m.pk: m.role for m in TeamMembership.objects.filter(team=team)}
        removed = [(f.instance.user.get_username(), f.instance.role) for f in formset.deleted_forms if f.instance.pk]
        super().save_formset(request, form, formset, change)
        for username, role in removed:
            audit_record(action=AuditEvent.Action.MEMBER_REMOVED, actor=actor, team_ids=[team.pk], target=username, role=role)
        for membership in formset.new_objects:
            audit_record(
                action=AuditEvent.Action.MEMBER_ADDED, actor=actor, team_ids=[team.pk], target=membership.user.get_username(),
                role=membership.role,
            )
        for membership, _ in formset.changed_objects:
            audit_record(
                action=AuditEvent.Action.MEMBER_CHANGED, actor=actor, team_ids=[team.pk], target=membership.user.get_username(),
                role=membership.role, was=before.get(membership.pk, ""),
            )


class MemoryGrantForm(forms.ModelForm):
    """Agents named by slug: across teams, one team's admin names the other team's agent, which their
    own lists do not show. One of the two must be an agent of a team the user administers."""

    reader_slug = forms.SlugField(label="Reader agent", help_text="The agent that may read (its slug).")
    owner_slug = forms.SlugField(label="Owner agent", help_text="The agent whose memory it may read (its slug).")

    class Meta:
        model = MemoryGrant
        fields = []

    def __init__(self, *args, scope=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.scope = scope

    def clean(self):
        cleaned = super().clean()
        slugs = [cleaned.get("reader_slug"), cleaned.get("owner_slug")]
        agents = {a.slug: a for a in Agent.objects.live().filter(slug__in=slugs)}
        for field in ("reader_slug", "owner_slug"):
            if cleaned.get(field) and cleaned[field] not in agents:
                self.add_error(field, "No such agent.")
        if self.errors:
            return cleaned
        reader, owner = agents[cleaned["reader_slug"]], agents[cleaned["owner_slug"]]
        if reader == owner:
            raise ValidationError("A grant names two different agents.")
        if not (self.scope.can_manage(reader.team_id) or self.scope.can_manage(owner.team_id)):
            raise ValidationError("One of the two agents must belong to a team you administer.")
        cleaned["reader"], cleaned["owner"] = reader, owner
        return cleaned


@admin.register(MemoryGrant)
class MemoryGrantAdmin(TeamScopedAdmin, admin.ModelAdmin):
    """Grants seen from both sides: a team's members see the grants of its agents' memories and to its
    agents, and its admins give, approve and revoke them."""

    team_fields = ("reader__team", "owner__team")
    form = MemoryGrantForm
    list_display = ["reader", "reader_team", "owner", "owner_team", "status", "created_at"]
    list_select_related = ["reader__team", "owner__team"]
    search_fields = ["reader__slug", "owner__slug"]
    actions = ["approve_selected"]

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        scope = request_team_scope(request)

        class ScopedForm(form):
            def __init__(self, *args, **inner):
                super().__init__(*args, scope=scope, **inner)

        return ScopedForm

    def get_fields(self, request, obj=None):
        return ["reader_slug", "owner_slug"] if obj is None else ["reader", "owner", "owner_team_approved", "reader_team_approved", "created_at"]

    def get_readonly_fields(self, request, obj=None):
        return [] if obj is None else ["reader", "owner", "owner_team_approved", "reader_team_approved", "created_at"]

    def has_change_permission(self, request, obj=None):
        return False  # a grant is given, approved (action) or revoked (delete), never edited

    def save_model(self, request, obj, form, change):
        scope = request_team_scope(request)
        grant = memory_grant_give(
            reader=form.cleaned_data["reader"], owner=form.cleaned_data["owner"],
            approving_team_ids=None if scope.everything else scope.manageable, actor=Actor.from_request(request),
        )
        obj.pk, obj.reader, obj.owner = grant.pk, grant.reader, grant.owner
        if not grant.is_active:
            messages.warning(request, "Across teams the grant works once the other team's admins approve it too.")

    def delete_model(self, request, obj):
        memory_grant_revoke(reader=obj.reader, owner=obj.owner, actor=Actor.from_request(request))

    def delete_queryset(self, request, queryset):
        actor = Actor.from_request(request)
        for grant in queryset.select_related("reader", "owner"):
            if self.may_manage(request, grant):
                memory_grant_revoke(reader=grant.reader, owner=grant.owner, actor=actor)

    @admin.display(description="Reader's team")
    def reader_team(self, grant):
        return grant.reader.team

    @admin.display(description="Owner's team")
    def owner_team(self, grant):
        return grant.owner.team

    @admin.display(description="Status")
    def status(self, grant):
        if grant.is_active:
            return "active"
        waiting = "owner's" if not grant.owner_team_approved else "reader's"
        return f"waiting for the {waiting} team"

    @admin.action(description="Approve selected grants for my teams", permissions=["operate"])
    def approve_selected(self, request, queryset):
        scope = request_team_scope(request)
        approved = 0
        for grant in queryset.select_related("reader", "owner"):
            if self.may_manage(request, grant):
                memory_grant_approve(
                    grant=grant, approving_team_ids=None if scope.everything else scope.manageable,
                    actor=Actor.from_request(request),
                )
                approved += 1
        self.message_user(request, f"Approved {approved} grant(s) for your teams.", messages.SUCCESS)


@admin.register(AuditEvent)
class AuditEventAdmin(TeamScopedAdmin, admin.ModelAdmin):
    """The audit trail: read-only for everyone; a team's admins see its events, viewers none."""

    view_role = "admin"

    list_display = ["created_at", "action", "actor", "ip", "agent_slug", "target", "teams"]
    list_filter = ["action"]
    search_fields = ["actor", "agent_slug", "target"]
    fields = ["created_at", "action", "actor", "actor_user_id", "ip", "teams", "agent_slug", "agent_id", "target", "details"]
    readonly_fields = fields
    show_full_result_count = False

    # An event names its teams by id in an array (it outlives their deletion), not through a relation.
    def team_ids_of(self, obj) -> set[int]:
        return set(obj.team_ids)

    def team_filter(self, team_ids) -> models.Q:
        return models.Q(team_ids__overlap=sorted(team_ids))

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(
            team_slugs=RawSQL(
                f"ARRAY(SELECT t.slug FROM {Team._meta.db_table} t "
                f"WHERE t.id = ANY({AuditEvent._meta.db_table}.team_ids) ORDER BY t.slug)", [],
            )
        )

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="Teams")
    def teams(self, event):
        # The teams' current slugs (one subquery for the page); the event keeps a deleted team's id.
        names = list(event.team_slugs or [])
        if len(event.team_ids) > len(names):
            names.append(f"{len(event.team_ids) - len(names)} deleted team(s)")
        return ", ".join(names)

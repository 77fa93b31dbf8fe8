from django.contrib import admin, messages

from agents.models import Agent, AgentToken
from agents.services import agent_token_issue, agent_token_revoke


class AgentTokenInline(admin.TabularInline):
    model = AgentToken
    extra = 0
    can_delete = False
    show_change_link = True
    fields = ["prefix", "label", "scopes", "created_at", "last_used_at", "expires_at", "revoked_at"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False  # tokens are created from the token admin, which shows the raw value once


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "is_active", "created_at"]
    list_filter = ["is_active"]
    search_fields = ["slug", "name"]
    inlines = [AgentTokenInline]


@admin.register(AgentToken)
class AgentTokenAdmin(admin.ModelAdmin):
    list_display = ["prefix", "agent", "label", "scopes", "created_at", "last_used_at", "expires_at", "revoked_at"]
    list_select_related = ["agent"]
    list_filter = ["revoked_at"]
    search_fields = ["prefix", "label", "agent__slug"]
    raw_id_fields = ["agent"]
    readonly_fields = ["prefix", "digest", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke_selected"]

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["agent", "label", "scopes", "expires_at"]
        return ["agent", "label", "scopes", "expires_at", "prefix", "digest", "created_at", "last_used_at", "revoked_at"]

    def save_model(self, request, obj, form, change):
        if change:
            return super().save_model(request, obj, form, change)
        raw = agent_token_issue(token=obj)
        # Messages live in the server-side session and are shown once, on the next page.
        messages.warning(request, f"New token for {obj.agent.slug}: {raw} — copy it now; it will not be shown again.")

    @admin.action(description="Revoke selected tokens")
    def revoke_selected(self, request, queryset):
        for token in queryset.filter(revoked_at__isnull=True):
            agent_token_revoke(token=token)
        self.message_user(request, "Revoked.", messages.SUCCESS)

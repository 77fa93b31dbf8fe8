"""The admin site: Django's, with the operator dashboard on its index page and a login lockout."""

from django.contrib import admin, messages

from memoryhub.ratelimit import login_failed, login_locked_for, login_succeeded


class MemoryHubAdminSite(admin.AdminSite):
    site_header = "MemoryHub"
    site_title = "MemoryHub admin"
    index_title = "Dashboard"
    # No "View site" link: the service has no public pages (its "/" is a 404). The header links the API
    # docs instead (templates/admin/base_site.html).
    site_url = None

    def index(self, request, extra_context=None):
        from agents.admin_scoping import request_team_scope
        from indexing.selectors import dashboard_stats

        team_ids = request_team_scope(request).team_ids  # a team member's dashboard counts their teams only
        return super().index(request, {"dashboard": dashboard_stats(team_ids=team_ids), **(extra_context or {})})

    def get_urls(self):
        from functools import partial

        from django.urls import path

        from memoryhub.usage.admin_views import usage_view

        view = self.admin_view(partial(usage_view, admin_site=self))
        return [path("usage/", view, name="usage"), *super().get_urls()]

    def login(self, request, extra_context=None):
        """Django's login, refused for a while after MEMORYHUB_ADMIN_LOGIN_MAX_FAILURES failed attempts
        for one username from one address — even with the right password, so guessing cannot go on.
        The address is REMOTE_ADDR: behind a proxy, the proxy must pass the client's own."""
        if request.method != "POST":
            return super().login(request, extra_context)
        username = str(request.POST.get("username", ""))[:150]
        address = request.META.get("REMOTE_ADDR", "")
        locked_for = login_locked_for(username=username, address=address)
        if locked_for:
            request.method = "GET"  # show the form again, without trying the password
            minutes = max(1, round(locked_for / 60))
            messages.error(request, f"Too many failed logins for this user. Try again in {minutes} minute(s).")
            response = super().login(request, extra_context)
            response.status_code = 429
            response["Retry-After"] = str(int(locked_for) + 1)
            return response
        response = super().login(request, extra_context)
        if request.user.is_authenticated and request.user.is_staff:
            login_succeeded(username=username, address=address)
        else:
            login_failed(username=username, address=address)
        return response

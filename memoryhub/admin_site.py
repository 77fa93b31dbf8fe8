"""The admin site: Django's, with the operator dashboard on its index page."""

from django.contrib import admin


class MemoryHubAdminSite(admin.AdminSite):
    site_header = "MemoryHub"
    site_title = "MemoryHub admin"
    index_title = "Dashboard"

    def index(self, request, extra_context=None):
        from indexing.selectors import dashboard_stats

        return super().index(request, {"dashboard": dashboard_stats(), **(extra_context or {})})

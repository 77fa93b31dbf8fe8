from django.contrib.admin.apps import AdminConfig


class MemoryHubAdminConfig(AdminConfig):
    """django.contrib.admin with MemoryHub's site (a dashboard on the index page)."""

    default_site = "memoryhub.admin_site.MemoryHubAdminSite"

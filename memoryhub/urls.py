from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from memoryhub import views
from integrations.mcp import McpView

handler404 = "memoryhub.errors.handler404"
handler500 = "memoryhub.errors.handler500"

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", views.metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("indexing.urls")),
    path("api/v1/", include("search.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    re_path(r"^mcp/?$", McpView.as_view(), name="mcp"),
    # The same server for MCP clients that cannot send a header: the agent's token in the URL, read-only.
    # Logs name the route ("mcp-url"), never the path, so the token is not written to them.
    # Only what looks like a token (agents.authentication.TOKEN_PATTERN): any other /mcp/... stays a 404.
    re_path(r"^mcp/(?P<url_token>mh_[A-Za-z0-9_-]{43})/?$", McpView.as_view(), name="mcp-url"),
]

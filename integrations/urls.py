from django.urls import path

from integrations import apis as tool_apis

urlpatterns = [
    path("tools", tool_apis.ToolListApi.as_view(), name="api-tools"),
    path("tools/<str:name>", tool_apis.ToolRunApi.as_view(), name="api-tool-run"),
]

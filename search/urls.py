from django.urls import include, path

urlpatterns: list = [
    path("", include("search.tool_urls")),
]

from django.urls import include, path

from search import apis

urlpatterns = [
    path("search", apis.SearchApi.as_view(), name="api-search"),
    path("", include("integrations.urls")),
]

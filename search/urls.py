from django.urls import path

from search import apis

urlpatterns = [
    path("search", apis.SearchApi.as_view(), name="api-search"),
]

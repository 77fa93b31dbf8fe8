from django.urls import path

from indexing import apis

urlpatterns = [
    path("status", apis.AgentStatusApi.as_view(), name="api-status"),
]

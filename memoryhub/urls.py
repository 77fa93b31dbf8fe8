from django.contrib import admin
from django.urls import include, path

from memoryhub import views

handler404 = "memoryhub.errors.handler404"
handler500 = "memoryhub.errors.handler500"

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("indexing.urls")),
    path("api/v1/", include("search.urls")),
]

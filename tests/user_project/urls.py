"""A project's URLconf mounting dtq under prefixes of its own, as docs/install.md does."""

from django.urls import include, path

urlpatterns = [
    path("ops/", include("dtq_dashboard.urls")),
    path("ops-api/", include("dtq_api.urls")),
]

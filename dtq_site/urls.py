from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),  # users, groups and the console's named permissions
    path("", include("dtq_api.urls")),
    path("", include("dtq_dashboard.urls")),
    path("", include("dtq_core.metrics_urls")),
]

handler404 = "dtq_api.exceptions.not_found"
handler500 = "dtq_api.exceptions.server_error"

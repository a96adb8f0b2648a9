"""GET /metrics: django-prometheus' HTTP metrics plus the Redis collector of `metrics.py`."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_safe
from django_prometheus.exports import ExportToDjangoView

from . import metrics as dtq_metrics


@csrf_exempt  # a POST gets require_safe's 405, not the CSRF middleware's 403
@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    """Export the process registry; the Redis collector joins it on first use, once per process."""
    dtq_metrics.register()
    response: HttpResponse = ExportToDjangoView(request)
    return response


urlpatterns = [path("metrics", metrics, name="metrics")]

"""GET /api/v1/stats: the task history series the console's charts draw (engine.history)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework.request import Request
from rest_framework.response import Response

from dtq_core.conf import get_engine
from dtq_core.errors import ValidationError
from dtq_core.history import RANGES

from .base import APIView, extend_schema
from .pagination import text_param
from .views import ERRORS

PARAMETERS = [
    OpenApiParameter("range", OpenApiTypes.STR, enum=list(RANGES), description="the span, ending now (default 1h)"),
    OpenApiParameter("queue", OpenApiTypes.STR, description="one queue's history (default: every queue)"),
    OpenApiParameter("type", OpenApiTypes.STR, description="one task type's history (default: every type)"),
    OpenApiParameter("step", OpenApiTypes.INT, description="seconds per point: a multiple of the range's "
                     "resolution (60 s up to 24h, 3600 s beyond) that divides it; default 60 / 300 / 3600 / 86400"),
]


class StatsView(APIView):
    """Task history: per point, tasks succeeded, failed, retried, dead-lettered, cancelled and
    expired, the wait and run time percentiles (ms) and the waiting tasks; the range's totals;
    and, without a type, a table of types, the slowest (p95 run time) first."""

    @extend_schema(operation_id="stats", parameters=PARAMETERS, responses={200: OpenApiTypes.OBJECT, **ERRORS})
    def get(self, request: Request) -> Response:
        step_text = text_param(request, "step")
        # isascii: "²".isdigit() is True, and int() refuses it (a 500 before).
        if step_text is not None and not (step_text.isascii() and step_text.isdigit() and len(step_text) <= 8):
            raise ValidationError("step must be a whole number of seconds", field="step")
        return Response(get_engine().history.stats(
            text_param(request, "range") or "1h", queue=text_param(request, "queue"),
            ttype=text_param(request, "type"), step=int(step_text) if step_text else None))

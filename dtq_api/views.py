"""Thin DRF views over the engine: parse, call, shape."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dtq_core.connection import UNAVAILABLE_ERRORS
from dtq_core.engine import get_engine

from .exceptions import envelope
from .serializers import SubmitSerializer


class TaskListView(APIView):
    @extend_schema(request=SubmitSerializer, responses={201: dict, 200: dict})
    def post(self, request: Request) -> Response:
        data = SubmitSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        engine = get_engine()
        enqueued = engine.enqueue(request_id=request._request.request_id, **data.validated_data)
        task = engine.get_task(enqueued.id)
        return Response(task, status=status.HTTP_201_CREATED if enqueued.created else status.HTTP_200_OK)


class TaskDetailView(APIView):
    def get(self, request: Request, task_id: str) -> Response:
        return Response(get_engine().get_task(task_id))


def health(request: HttpRequest) -> JsonResponse:
    """Liveness: 200 while the process serves requests."""
    return JsonResponse({"status": "ok"})


def ready(request: HttpRequest) -> JsonResponse:
    """Readiness: 503 REDIS_UNAVAILABLE when Redis does not answer within the client timeout."""
    try:
        get_engine().ping()
    except UNAVAILABLE_ERRORS:
        return JsonResponse(envelope("REDIS_UNAVAILABLE", "Redis is unavailable", request), status=503)
    return JsonResponse({"status": "ready"})

"""/api/v1/workflows: submit, list, read and cancel workflows (thin views over engine.workflows)."""

from __future__ import annotations

from typing import Any

from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from dtq_core.conf import get_engine
from dtq_core.engine.workflows import STATUSES
from dtq_core.errors import ValidationError

from . import serializers as s
from .auth import actor_for
from .base import APIView, extend_schema
from .middleware import request_id_of
from .pagination import PAGE_PARAMETERS, text_param
from .permissions import DestructiveMixin
from .views import DESTRUCTIVE_ERRORS, ERRORS, filters

LIST_LIMIT = 200


class WorkflowListView(APIView):
    """Submit a workflow (a chain or group of task bodies, nested), or list workflows newest first."""

    @extend_schema(operation_id="workflows_submit", request=s.WorkflowSubmitSerializer,
                   responses={201: s.WorkflowSerializer, 413: s.ErrorSerializer, **ERRORS})
    def post(self, request: Request) -> Response:
        if not isinstance(request.data, dict):
            raise ValidationError('the body must be a JSON object: {"chain": [...]} or {"group": [...], '
                                  '"then": {...}}', field="body")
        engine = get_engine()
        workflow_id = engine.workflows.submit(request.data, request_id=request_id_of(request._request))
        return Response(engine.workflows.get(workflow_id), status=status.HTTP_201_CREATED)

    @extend_schema(operation_id="workflows_list", parameters=[*filters("status"), *PAGE_PARAMETERS],
                   responses={200: s.WorkflowPageSerializer, **ERRORS})
    def get(self, request: Request) -> Response:
        rows, cursor = get_engine().workflows.list(status=_status(request), cursor=text_param(request, "cursor"),
                                                   limit=_limit(request))
        url = replace_query_param(request.build_absolute_uri(), "cursor", cursor) if cursor else None
        return Response({"results": rows, "next": url})


class WorkflowDetailView(APIView):
    @extend_schema(operation_id="workflows_get", responses={200: s.WorkflowSerializer, **ERRORS})
    def get(self, request: Request, workflow_id: str) -> Response:
        return Response(get_engine().workflows.get(workflow_id))


class WorkflowCancelView(DestructiveMixin, APIView):
    """Cancel a running workflow: steps not started never start, running and waiting ones are
    cancelled as a task cancel would. 409 WORKFLOW_FINISHED when it already ended."""

    permission = "cancel_task"

    @extend_schema(operation_id="workflows_cancel", request=None,
                   responses={202: s.WorkflowSerializer, 409: s.ErrorSerializer, **DESTRUCTIVE_ERRORS})
    def post(self, request: Request, workflow_id: str) -> Response:
        return Response(get_engine().workflows.cancel(workflow_id, actor_for(request)),
                        status=status.HTTP_202_ACCEPTED)


def _status(request: Request) -> str | None:
    wanted = text_param(request, "status")
    if wanted is not None and wanted not in STATUSES:
        raise ValidationError(f"status must be one of {', '.join(STATUSES)}", field="status")
    return wanted


def _limit(request: Request) -> int:
    raw: Any = request.query_params.get("limit")
    if raw in (None, ""):
        return 50
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= LIST_LIMIT:
        raise ValidationError(f"limit must be a whole number between 1 and {LIST_LIMIT}", field="limit")
    return int(raw)

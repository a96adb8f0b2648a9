"""One error envelope everywhere: {"error": {"code", "message", "request_id", ...}}."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, JsonResponse
from rest_framework import exceptions as drf
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_handler

from dtq_core.errors import DtqError, error_body
from dtq_core.redis_errors import translate

from .middleware import request_id_of

_DRF_CODES = {
    drf.ParseError: "MALFORMED_JSON",
    drf.UnsupportedMediaType: "UNSUPPORTED_MEDIA_TYPE",
    drf.MethodNotAllowed: "METHOD_NOT_ALLOWED",
    drf.NotFound: "NOT_FOUND",
    drf.NotAuthenticated: "AUTHENTICATION_REQUIRED",
    drf.AuthenticationFailed: "AUTHENTICATION_FAILED",
    drf.PermissionDenied: "PERMISSION_DENIED",
    drf.NotAcceptable: "NOT_ACCEPTABLE",
    drf.Throttled: "THROTTLED",
    drf.ValidationError: "VALIDATION_ERROR",
}


def envelope(code: str, message: str, request: HttpRequest | None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message,
                            "request_id": request_id_of(request) if request is not None else ""}
    body.update({k: v for k, v in extra.items() if v is not None})
    return {"error": body}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    request = context.get("request")
    trouble = translate(exc)
    if trouble is not None:
        exc = trouble
    if isinstance(exc, DtqError):
        return Response(error_body(exc, request_id_of(request) if request is not None else ""),
                        status=exc.http_status)
    if isinstance(exc, RequestDataTooBig):  # a body past DATA_UPLOAD_MAX_MEMORY_SIZE: 413, not Django's HTML 400
        return Response(envelope("PAYLOAD_TOO_LARGE", "request body is too large", request), status=413)
    if isinstance(exc, Http404):
        # DRF answers Django's Http404 as NotFound; say what was not found (an unknown ?format=
        # is the usual one: content negotiation raises it with no message).
        wanted = getattr(request, "query_params", {}).get("format")
        known = [r.format for r in getattr(context.get("view"), "renderer_classes", ())]
        exc = drf.NotFound(f"unknown format {wanted!r}: use one of {', '.join(known)}"
                           if wanted and wanted not in known else str(exc) or "not found")
    elif isinstance(exc, DjangoPermissionDenied):
        exc = drf.PermissionDenied(str(exc) or None)
    response = drf_handler(exc, context)
    if response is None:
        return None
    code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), "ERROR")
    if isinstance(exc, drf.ValidationError):
        message, fields = _flatten(exc.detail)
        response.data = envelope(code, message, request, fields=fields)
    elif isinstance(exc, drf.ParseError):
        response.data = envelope(code, f"request body is not valid JSON: {exc.detail}", request)
    else:
        response.data = envelope(code, str(getattr(exc, "detail", exc)), request)
    return response


def _flatten(detail: Any) -> tuple[str, dict[str, Any] | None]:
    if isinstance(detail, dict):
        parts = []
        for name, errors in detail.items():
            text = "; ".join(str(e) for e in errors) if isinstance(errors, list) else str(errors)
            parts.append(f"{name}: {text}")
        return "; ".join(parts), {k: [str(e) for e in (v if isinstance(v, list) else [v])] for k, v in detail.items()}
    if isinstance(detail, list):
        return "; ".join(str(e) for e in detail), None
    return str(detail), None


def _wants_json(request: HttpRequest) -> bool:
    return request.path.startswith("/api/") or "application/json" in request.headers.get("Accept", "")


def not_found(request: HttpRequest, exception: Exception | None = None) -> Any:
    if _wants_json(request):
        return JsonResponse(envelope("NOT_FOUND", f"no route for {request.path}", request), status=404)
    from django.views.defaults import page_not_found

    return page_not_found(request, exception)


def server_error(request: HttpRequest) -> Any:
    if _wants_json(request):
        return JsonResponse(envelope("INTERNAL_ERROR", "internal server error", request), status=500)
    from django.views.defaults import server_error as default

    return default(request)

"""Submit without DRF's per-request machinery, for the calls where it would decide nothing.

DRF negotiates a renderer and a parser, authenticates, checks permissions and throttles, wraps
the request and renders through a template response on every call: on POST /api/v1/tasks that
cost more than the Redis round trip. The submit endpoints are open (AllowAny) and answer JSON, so
for a plain JSON call (a JSON body, an Accept that only JSON satisfies or none, no query string,
no cookie) each of those steps has one possible outcome. Such a call runs the view's own
function here, with DRF's JSON parser and renderer and dtq's exception handler, and gets the
same status, body and headers. Any other call (a browser's, with its session cookie and CSRF
check, or asking for the browsable API) goes through DRF as before.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.cache import patch_vary_headers
from rest_framework.renderers import JSONRenderer

from .exceptions import exception_handler
from .parsers import JSONParser

JSON_ONLY_ACCEPTS = frozenset(("", "*/*", "application/json"))
_PARSER = JSONParser()
_RENDERER = JSONRenderer()


def is_plain_json_call(request: HttpRequest) -> bool:
    meta = request.META
    return (request.content_type == "application/json" and meta.get("HTTP_ACCEPT", "") in JSON_ONLY_ACCEPTS
            and not meta.get("QUERY_STRING") and not meta.get("HTTP_COOKIE"))


def request_data(request: HttpRequest) -> Any:
    """The body as DRF's request.data has it: {} when Content-Length is 0 or unset, else JSON
    (ParseError: MALFORMED_JSON), read through request.body as DRF's JSON parsing does, so a body
    past DATA_UPLOAD_MAX_MEMORY_SIZE raises RequestDataTooBig (413 PAYLOAD_TOO_LARGE)."""
    try:
        length = int(request.META.get("CONTENT_LENGTH", request.META.get("HTTP_CONTENT_LENGTH", 0)))
    except (ValueError, TypeError):
        length = 0
    if length == 0:
        return {}
    return _PARSER.parse(io.BytesIO(request.body), "application/json",
                         {"encoding": request.encoding or settings.DEFAULT_CHARSET})


def respond(view: Any, request: HttpRequest, handle: Callable[[Any], tuple[Any, int]]) -> HttpResponse:
    """Run handle(request data) -> (body, status) and answer as DRF's finalize_response would."""
    try:
        data, status = handle(request_data(request))
    except Exception as exc:  # as DRF's handle_exception: answered by the exception handler, or raised
        response = exception_handler(exc, {"request": request, "view": view})
        if response is None:
            raise
        out = _json(response.data, response.status_code)
        for name, value in response.items():
            if name.lower() != "content-type":
                out[name] = value
    else:
        out = _json(data, status)
    out["Allow"] = ", ".join(view.allowed_methods)
    # Through DRF the call reads the session (for request.user), so Django's session middleware
    # adds Cookie to Vary; said here too, as caches between may rely on it.
    patch_vary_headers(out, ("Accept", "Cookie"))
    return out


def _json(data: Any, status: int) -> HttpResponse:
    return HttpResponse(_RENDERER.render(data, "application/json", {}), status=status,
                        content_type="application/json")

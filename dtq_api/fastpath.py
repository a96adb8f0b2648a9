"""Submit without DRF's per-request machinery, for the calls where it would decide nothing.

DRF negotiates a renderer and a parser, authenticates, checks permissions and throttles, wraps
the request and renders through a template response on every call: on POST /api/v1/tasks that
cost more than the Redis round trip. The submit endpoints are open (AllowAny) and answer JSON, so
for a plain JSON call (a JSON body, an Accept that only JSON satisfies or none, no query string,
no cookie) each of those steps has one possible outcome. Such a call runs the view's own
function here, with the JSON parsing of dtq's DRF parser, DRF's renderer and dtq's exception
handler, and gets the same status, body and headers. Any other call (a browser's, with its
session cookie and CSRF check, or asking for the browsable API) goes through DRF as before.
Throttling and versioning have one outcome too: dtq's views have none (dtq_api.base).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.cache import patch_vary_headers
from rest_framework.renderers import JSONRenderer

from .exceptions import exception_handler
from .parsers import declared_length, load_json

# What a missing Accept header counts as, and the values only JSON satisfies. An empty header is
# not one: DRF finds no renderer for it (406).
JSON_ONLY_ACCEPTS = frozenset(("*/*", "application/json"))
_RENDERER = JSONRenderer()


def is_plain_json_call(request: HttpRequest) -> bool:
    meta = request.META
    return (request.content_type == "application/json" and meta.get("HTTP_ACCEPT", "*/*") in JSON_ONLY_ACCEPTS
            and not meta.get("QUERY_STRING") and not meta.get("HTTP_COOKIE"))


def request_data(request: HttpRequest) -> Any:
    """The body as DRF's request.data has it (dtq_api.parsers.Request and JSONParser): {} when
    Content-Length is 0 or the body sent without one is empty, else JSON (ParseError:
    MALFORMED_JSON), read through request.body as DRF's JSON parsing does, so a body past
    DATA_UPLOAD_MAX_MEMORY_SIZE raises RequestDataTooBig (413 PAYLOAD_TOO_LARGE)."""
    length = declared_length(request.META)
    if length == 0:
        return {}
    raw = request.body
    if length is None and not raw:  # sent without Content-Length (chunked), and nothing in it
        return {}
    return load_json(raw, request.encoding or settings.DEFAULT_CHARSET)


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
    if out.has_header("Vary"):
        patch_vary_headers(out, ("Accept", "Cookie"))
    else:  # what patch_vary_headers writes on a response without Vary, without its parsing
        out["Vary"] = "Accept, Cookie"
    return out


def _json(data: Any, status: int) -> HttpResponse:
    return HttpResponse(_RENDERER.render(data, "application/json", {}), status=status,
                        content_type="application/json")

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

import json
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.cache import patch_vary_headers
from rest_framework.exceptions import ParseError
from rest_framework.renderers import JSONRenderer
from rest_framework.utils.json import strict_constant

from .exceptions import exception_handler
from .parsers import _SURROGATE_ESCAPE, _holds_lone_surrogate

JSON_ONLY_ACCEPTS = frozenset(("", "*/*", "application/json"))
_RENDERER = JSONRenderer()


def is_plain_json_call(request: HttpRequest) -> bool:
    meta = request.META
    return (request.content_type == "application/json" and meta.get("HTTP_ACCEPT", "") in JSON_ONLY_ACCEPTS
            and not meta.get("QUERY_STRING") and not meta.get("HTTP_COOKIE"))


def request_data(request: HttpRequest) -> Any:
    """The body as DRF's request.data has it: {} when Content-Length is 0 or unset, else JSON
    (ParseError: MALFORMED_JSON), read through request.body as DRF's JSON parsing does, so a body
    past DATA_UPLOAD_MAX_MEMORY_SIZE raises RequestDataTooBig (413 PAYLOAD_TOO_LARGE).

    dtq_api.parsers.JSONParser's checks and messages, without its stream wrappers (a decoding
    reader over a BytesIO copy of the body): json.load on such a reader decodes the whole body
    and parses the string, as here."""
    try:
        length = int(request.META.get("CONTENT_LENGTH", request.META.get("HTTP_CONTENT_LENGTH", 0)))
    except (ValueError, TypeError):
        length = 0
    if length == 0:
        return {}
    raw = request.body
    try:
        data = json.loads(raw.decode(request.encoding or settings.DEFAULT_CHARSET), parse_constant=strict_constant)
    except RecursionError:
        raise ParseError("JSON nested too deeply") from None
    except ValueError as exc:  # UnicodeDecodeError too, as through DRF's decoding reader
        raise ParseError(f"JSON parse error - {exc}") from None
    if _SURROGATE_ESCAPE.search(raw) and _holds_lone_surrogate(data):
        raise ParseError("a string holds an unpaired surrogate escape (\\ud800-\\udfff), which is not Unicode")
    return data


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

"""GET /api/v1/: an index of the API, built from its routes so it cannot drift from them."""

from __future__ import annotations

import re
from typing import Any

from django.http import HttpRequest, JsonResponse
from django.urls import URLPattern, reverse
from django.views.decorators.csrf import csrf_exempt

from .exceptions import envelope

_PARAM = re.compile(r"<(?:\w+:)?(\w+)>")
_SKIPPED_METHODS = {"options", "head"}


def _methods(pattern: URLPattern) -> list[str]:
    view_class = getattr(pattern.callback, "view_class", None)
    if view_class is None:
        return ["GET"]
    return [m.upper() for m in view_class.http_method_names if m not in _SKIPPED_METHODS and hasattr(view_class, m)]


def endpoints(patterns: list[Any], prefix: str) -> list[dict[str, Any]]:
    """The routes under `prefix` as {path, methods, name}, in the order they are declared."""
    rows = []
    for pattern in patterns:
        route = getattr(pattern.pattern, "_route", "")
        if not isinstance(pattern, URLPattern) or not route.startswith(prefix) or route == prefix:
            continue
        rows.append({"path": "/" + _PARAM.sub(r"{\1}", route), "methods": _methods(pattern), "name": pattern.name})
    return rows


@csrf_exempt  # it changes nothing: a POST gets the JSON 405 below, not CSRF's HTML 403
def api_index(request: HttpRequest) -> JsonResponse:
    """The API's index: every endpoint with its methods, and where the schema and its docs are."""
    if request.method not in ("GET", "HEAD"):
        response = JsonResponse(envelope("METHOD_NOT_ALLOWED", f"method {request.method} not allowed on "
                                         f"{request.path}", request), status=405)
        response["Allow"] = "GET, HEAD"
        return response
    from . import urls  # the routes this index describes (urls imports this module)

    return JsonResponse({
        "name": "dtq API", "version": "v1",
        "schema": request.build_absolute_uri(reverse("schema")),
        "docs": request.build_absolute_uri(reverse("api-docs")),
        "endpoints": endpoints(urls.urlpatterns, urls.V1),
    })

"""X-Request-ID on every request and response (taken from the request when it is sane)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

_SAFE = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def request_id_of(request: HttpRequest) -> str:
    """The request's id; made here when RequestIdMiddleware is not installed (then no X-Request-ID
    header goes back, which check dtq.W801 says, but audit entries and errors still carry one)."""
    request = getattr(request, "_request", request)  # DRF's Request: the id lives on Django's
    if not getattr(request, "request_id", ""):
        request.request_id = uuid.uuid4().hex  # type: ignore[attr-defined]
    return request.request_id  # type: ignore[attr-defined]


class RequestIdMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        given = request.headers.get("X-Request-ID", "")
        request.request_id = given if _SAFE.fullmatch(given) else uuid.uuid4().hex  # type: ignore[attr-defined]
        response = self.get_response(request)
        response["X-Request-ID"] = request.request_id  # type: ignore[attr-defined]
        return response

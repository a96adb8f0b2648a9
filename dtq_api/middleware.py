"""X-Request-ID on every request and response (taken from the request when it is sane)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.http import HttpRequest, HttpResponse, JsonResponse

if TYPE_CHECKING:
    from rest_framework.request import Request

_SAFE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_DIGITS = re.compile(r"[0-9]+")


def request_id_of(request: HttpRequest | Request) -> str:
    """The request's id; made here when RequestIdMiddleware is not installed (then no X-Request-ID
    header goes back, which check dtq.W801 says, but audit entries and errors still carry one)."""
    django_request: HttpRequest = getattr(request, "_request", request)  # DRF's: the id lives on Django's
    request_id: str = getattr(django_request, "request_id", "")
    if not request_id:
        request_id = uuid.uuid4().hex
        # An attribute of dtq's own on Django's request, which its stubs cannot know.
        django_request.request_id = request_id  # type: ignore[attr-defined]
    return request_id


class RequestIdMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        given = request.headers.get("X-Request-ID", "")
        request.request_id = given if _SAFE.fullmatch(given) else uuid.uuid4().hex  # type: ignore[attr-defined]
        response = self.get_response(request)
        response["X-Request-ID"] = request.request_id  # type: ignore[attr-defined]
        return response


class ContentLengthMiddleware:
    """A Content-Length that is not a decimal number is the client's error (RFC 9110, 8.6): a 400
    in the envelope, before anything reads the body or the header (django_prometheus's metrics
    middleware calls int() on it, which turned such a request into a 500)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        value = request.META.get("CONTENT_LENGTH")
        if value and not _DIGITS.fullmatch(value.strip()):
            return JsonResponse({"error": {
                "code": "VALIDATION_ERROR", "message": f"Content-Length is not a number: {value[:40]!r}",
                "request_id": request_id_of(request)}}, status=400)
        return self.get_response(request)

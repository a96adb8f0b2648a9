"""Cursor pagination over engine pages: ?cursor=&limit= in, {"results", "next"} out."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from dtq_core.engine.reads import MAX_PAGE, Page
from dtq_core.errors import ValidationError

MAX_PARAM = 200

PAGE_PARAMETERS = [
    OpenApiParameter("cursor", OpenApiTypes.STR, description="opaque; copy it from `next`"),
    OpenApiParameter("limit", OpenApiTypes.INT, description=f"page size, 1-{MAX_PAGE} (default 50)"),
]


def text_param(request: Request, name: str) -> str | None:
    """Read an optional query parameter; refuse absurd lengths instead of scanning with them."""
    value = request.query_params.get(name)
    if value is None or value == "":
        return None
    if len(value) > MAX_PARAM:
        raise ValidationError(f"{name} must be at most {MAX_PARAM} characters", field=name)
    return value


def page_params(request: Request) -> dict[str, Any]:
    raw = request.query_params.get("limit")
    limit = None
    if raw not in (None, ""):
        if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE:
            raise ValidationError(f"limit must be a whole number between 1 and {MAX_PAGE}", field="limit")
        limit = int(raw)
    return {"cursor": text_param(request, "cursor"), "limit": limit}


def page_response(request: Request, page: Page) -> Response:
    url = None
    if page.next_cursor:
        url = replace_query_param(request.build_absolute_uri(), "cursor", page.next_cursor)
    return Response({"results": page.items, "next": url})

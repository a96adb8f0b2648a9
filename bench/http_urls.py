"""The product's URLs plus bare Django JSON views: the ceiling the submit endpoints are held to.

Each bare view does what any JSON endpoint must (parse the body, answer JSON) and nothing of
dtq's: no DRF, no validation, no Redis. They pass through the same middleware chain."""

from __future__ import annotations

import json
import uuid

from django.http import HttpRequest, JsonResponse
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt


@csrf_exempt
def bare_single(request: HttpRequest) -> JsonResponse:
    body = json.loads(request.body)
    return JsonResponse({"id": uuid.uuid4().hex, "type": body.get("type"), "status": "PENDING"}, status=201)


@csrf_exempt
def bare_batch(request: HttpRequest) -> JsonResponse:
    items = json.loads(request.body)["tasks"]
    return JsonResponse({"results": [{"id": uuid.uuid4().hex, "status": "PENDING", "created": True}
                                     for _ in items]})


urlpatterns = [
    path("bench/bare", bare_single),
    path("bench/bare/batch", bare_batch),
    path("", include("dtq_site.urls")),
]

"""Checkout enqueues the order's tasks only when its transaction commits; status reads them back."""

from __future__ import annotations

import itertools

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from dtq_core.django_tasks import enqueue_on_commit
from dtq_core.django_tasks.compat import (  # django.tasks.exceptions on Django 6
    TaskResultDoesNotExist,
    TaskResultMismatch,
)

from .tasks import notify_warehouse, render_invoice_pdf, send_receipt

_order_ids = itertools.count(1000)  # stands in for Order.objects.create(...).pk


@csrf_exempt  # an endpoint for API clients (and the curl of the docs); a form view keeps CSRF
@require_POST
def checkout(request: HttpRequest) -> JsonResponse:
    email = request.POST.get("email", "")
    if "@" not in email:
        return JsonResponse({"error": "email is required"}, status=400)
    with transaction.atomic():
        order_id = next(_order_ids)  # the order row would be written here
        receipt = enqueue_on_commit(send_receipt, order_id, email)
        invoice = enqueue_on_commit(render_invoice_pdf, order_id)
        warehouse = enqueue_on_commit(notify_warehouse, order_id)
    return JsonResponse({"order_id": order_id, "tasks": {"receipt": receipt.id, "invoice": invoice.id,
                                                         "warehouse": warehouse.id}}, status=202)


@require_GET
def receipt_status(request: HttpRequest, task_id: str) -> JsonResponse:
    try:
        result = send_receipt.get_result(task_id)
    except (TaskResultDoesNotExist, TaskResultMismatch):  # unknown, or another task's id
        return JsonResponse({"error": "no such receipt task"}, status=404)
    body = {"id": result.id, "status": result.status, "attempts": result.attempts,
            "worker_ids": result.worker_ids, "errors": [e.exception_class_path for e in result.errors]}
    if result.status == "SUCCESSFUL":
        body["return_value"] = result.return_value
    return JsonResponse(body)

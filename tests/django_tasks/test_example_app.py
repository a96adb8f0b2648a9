"""The example app of docs/django-tasks.md, end to end: a request, a commit, a real worker."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client, RequestFactory

from dtq_core.django_tasks import DtqBackend
from dtq_core.engine import Engine
from examples.receipts import tasks, views

from ..conftest import WorkerProcess

pytestmark = pytest.mark.django_db(transaction=True)


def test_checkout_runs_its_tasks_on_a_worker(backend: DtqBackend, live_engine: Engine,
                                            start_worker: Callable[..., WorkerProcess]) -> None:
    rf = RequestFactory()
    response = views.checkout(rf.post("/checkout/", {"email": "ada@example.com"}))
    assert response.status_code == 202
    body = json.loads(response.content)
    ids = body["tasks"]
    assert {live_engine.tasks.get(i)["priority"] for i in ids.values()} == {"high", "normal", "low"}
    pending = json.loads(views.receipt_status(rf.get("/"), ids["receipt"]).content)
    assert pending["status"] == "READY" and "return_value" not in pending
    worker = start_worker("--burst", "--name", "demo")
    assert worker.wait(60) == 0, worker.output()
    done = json.loads(views.receipt_status(rf.get("/"), ids["receipt"]).content)
    assert done == {"id": ids["receipt"], "status": "SUCCESSFUL", "attempts": 1, "worker_ids": ["demo"],
                    "errors": [], "return_value": {"order_id": body["order_id"], "to": "ada@example.com",
                                                   "subject": f"Your receipt for order #{body['order_id']}"}}
    assert tasks.notify_warehouse.get_result(ids["warehouse"]).return_value == \
        f"order {body['order_id']} queued for packing"
    assert tasks.render_invoice_pdf.get_result(ids["invoice"]).return_value["attempt"] == 1


def test_bad_input_and_unknown_ids(backend: DtqBackend, live_engine: Engine) -> None:
    rf = RequestFactory()
    assert views.checkout(rf.post("/checkout/", {"email": "nope"})).status_code == 400
    assert views.checkout(rf.get("/checkout/")).status_code == 405
    assert views.receipt_status(rf.get("/"), "0" * 32).status_code == 404


def test_the_documented_curl_works_through_the_middleware(backend: DtqBackend, live_engine: Engine,
                                                          settings: Any) -> None:
    # docs/django-tasks.md posts with curl: no CSRF token, through every middleware.
    settings.ROOT_URLCONF = "examples.receipts.urls"
    client = Client(enforce_csrf_checks=True)
    response = client.post("/checkout/", {"email": "ada@example.com"})
    assert response.status_code == 202, response.content[:200]
    ids = response.json()["tasks"]
    assert client.get(f"/receipts/{ids['receipt']}/").json()["status"] == "READY"
    # Another of the order's tasks is not a receipt: 404, not a TaskResultMismatch 500.
    assert client.get(f"/receipts/{ids['invoice']}/").status_code == 404


def test_the_example_urls_route_to_the_views() -> None:
    from examples.receipts import urls

    routes = {p.name: (str(p.pattern), p.callback) for p in urls.urlpatterns}
    assert routes == {"checkout": ("checkout/", views.checkout),
                      "receipt-status": ("receipts/<str:task_id>/", views.receipt_status)}


def test_an_invoice_retries_with_the_attempt_in_its_context(backend: DtqBackend,
                                                            start_worker: Callable[..., WorkerProcess]) -> None:
    result = tasks.render_invoice_pdf.enqueue(7, fail_first=1)
    worker = start_worker("--burst", DTQ_RETRY_BASE_S="0.01", DTQ_RETRY_MAX_S="0.05")
    assert worker.wait(60) == 0, worker.output()
    result.refresh()
    assert result.return_value == {"order_id": 7, "pdf": "invoices/7.pdf", "attempt": 2}
    assert [e.exception_class_path for e in result.errors] == ["dtq_tasks.RetryableError"]

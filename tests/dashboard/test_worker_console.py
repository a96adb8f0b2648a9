"""The console's worker page (issue 24, item 7): a real worker's details, and the Quiet button for
staff holding the control_worker permission (403 without it), audited as the user."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.test import Client
from rest_framework.test import APIClient

from dtq_core.engine import Engine

from ..conftest import WorkerProcess, wait_for
from ..failure.support import FAST

ENV: dict[str, Any] = {**FAST, "DTQ_TASK_MODULES": "tests.history.handlers"}


def test_the_console_worker_page_and_its_buttons(live_engine: Engine, users: Any, login: Callable[[str], Client],
                                                 start_worker: Callable[..., WorkerProcess]) -> None:
    from django.contrib.auth.models import Permission

    worker = start_worker("--name", "console-w", "--queues", "ctl4", **ENV)
    wait_for(lambda: APIClient().get("/api/v1/workers/console-w").status_code == 200, timeout=20,
             message=worker.output)
    html = login("viewer").get("/workers/console-w/").content.decode()
    assert "<h1>Worker <code>console-w</code>" in html and "Memory (RSS)" in html and "Quiet</button>" not in html
    assert 'href="/workers/console-w/"' in login("viewer").get("/workers/").content.decode()
    assert login("operator").post("/workers/console-w/quiet").status_code == 403  # not granted control_worker
    users["operator"].user_permissions.add(Permission.objects.get(codename="control_worker"))
    operator = login("operator")
    assert "Quiet</button>" in operator.get("/workers/console-w/").content.decode()
    response = operator.post("/workers/console-w/quiet", follow=True)
    assert "Told worker console-w to quiet" in response.content.decode()
    wait_for(lambda: live_engine.workers.get("console-w")["state"] == "quiet", timeout=10, message=worker.output)
    assert operator.get("/workers/console-w/quiet").status_code == 405
    assert login("viewer").get("/workers/nobody/").status_code == 404
    assert login("viewer").get("/workers/" + "x" * 300 + "/").status_code == 400
    entry = live_engine.audit.list().items[0]
    assert entry["action"] == "worker.quiet" and entry["actor"] == "user:operator"


def test_a_worker_named_with_a_slash_is_listed_linked_and_controlled(
        live_engine: Engine, users: Any, login: Callable[[str], Client], anonymous_admin: Any,
        start_worker: Callable[..., WorkerProcess]) -> None:
    # It should take a Kubernetes-style name ("namespace/pod"), which runworker_dtq --name accepts:
    # the overview and /workers/ once answered 500 while such a worker was alive.
    worker = start_worker("--name", "k8s/pod-1", "--queues", "ctl5", **ENV)
    wait_for(lambda: any(w["id"] == "k8s/pod-1" for w in live_engine.workers.list()), timeout=20,
             message=worker.output)
    admin = login("admin")
    for page in ("/", "/workers/"):
        response = admin.get(page)
        assert response.status_code == 200 and 'href="/workers/k8s/pod-1/"' in response.content.decode()
    html = admin.get("/workers/k8s/pod-1/").content.decode()
    assert "<h1>Worker <code>k8s/pod-1</code>" in html and 'action="/workers/k8s/pod-1/quiet"' in html
    response = admin.post("/workers/k8s/pod-1/quiet", follow=True)
    assert "Told worker k8s/pod-1 to quiet" in response.content.decode()
    assert response.redirect_chain[-1][0] == "/workers/k8s/pod-1/"
    api = APIClient()
    wait_for(lambda: api.get("/api/v1/workers/k8s/pod-1").json().get("state") == "quiet", timeout=10,
             message=worker.output)
    assert api.post("/api/v1/workers/k8s/pod-1/stop").json() == {"worker_id": "k8s/pod-1", "control": "stop",
                                                                 "changed": True}
    assert worker.wait(30) == 0
    assert admin.get("/workers/k8s/pod-2/").status_code == 404

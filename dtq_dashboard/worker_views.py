"""The console's worker page and its controls, quiet and stop (thin views over engine.workers)."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from dtq_core.conf import get_engine
from dtq_core.engine.audit import Actor

from .guards import console_action, console_page
from .templatetags.dtq_console import worker_url as _worker_url


@console_page
def worker(request: HttpRequest, worker_id: str) -> HttpResponse:
    from .views import _render

    return _render(request, "worker.html", {"w": get_engine().workers.get(worker_id)}, nav="workers")


DONE = {"quiet": "it takes no more tasks from its next heartbeat and finishes what it runs",
        "stop": "from its next heartbeat it drains (running tasks get the drain timeout) and exits"}


def _tell(request: HttpRequest, actor: Actor, back: str, worker_id: str, control: str) -> HttpResponse:
    workers = get_engine().workers
    if (workers.quiet if control == "quiet" else workers.stop)(worker_id, actor):
        messages.success(request, f"Told worker {worker_id} to {control}: {DONE[control]}.")
    else:
        messages.info(request, f"Worker {worker_id} was told so already.")
    return redirect(back)


@console_action("control_worker", default_next=_worker_url)
def quiet(request: HttpRequest, actor: Actor, back: str, worker_id: str) -> HttpResponse:
    return _tell(request, actor, back, worker_id, "quiet")


@console_action("control_worker", default_next=_worker_url)
def stop(request: HttpRequest, actor: Actor, back: str, worker_id: str) -> HttpResponse:
    return _tell(request, actor, back, worker_id, "stop")

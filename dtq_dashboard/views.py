"""Console pages and actions: thin views over dtq_core's engine (the same calls as the API and CLI)."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET

from dtq_core.conf import get_engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.dlq import DlqSelection
from dtq_core.engine.reads import SCAN_BUDGET
from dtq_core.engine.recent import ID_PREFIX_RE
from dtq_core.errors import (
    QueueFull,
    QueueLimitReached,
    RedisTrouble,
    TaskNotFound,
    TaskRefused,
    ValidationError,
    error_body,
)
from dtq_core.keys import is_task_id
from dtq_core.redis_errors import redis_trouble
from dtq_core.submit import MAX_JSON_DEPTH, nested_deeper_than
from dtq_core.task import TERMINAL

from . import forms
from .guards import console_action, console_page
from .history_views import history_context, range_of
from .permissions import allowed_actions, can_view_console, login_required_to_read
from .timeline import task_timeline
from .workflow_graph import MAX_DRAWN
from .workflow_graph import render as workflow_svg

PAGE = 50
CONFIRM_BUDGET = 20_000  # dead letters a queue/type preview examines (the default cap is 10,000)


def _render(request: HttpRequest, template: str, context: dict[str, Any], *, nav: str,
            status: int = 200) -> HttpResponse:
    context.update({"nav": nav, "can": allowed_actions(request.user),
                    "login_required": login_required_to_read()})
    return render(request, f"dtq_dashboard/{template}", context, status=status)


def _bad_filters(request: HttpRequest, form: forms._Form, nav: str) -> HttpResponse:
    return _render(request, "error.html", {"title": "Bad request", "detail": form.first_error()}, nav=nav,
                   status=400)


def _leader_beating(engine: Any, leader: str | None, workers: list[dict[str, Any]]) -> bool:
    """Whether the lock holder's heartbeats are on time (half a beat and a second of slack).
    'alive' would be too late: it allows a visibility timeout, while a frozen leader's lock lapses
    within its TTL (10 s by default, against beats every 5 s)."""
    beat = engine.config.heartbeat_every_s
    return any(w["id"] == leader and w["heartbeat_age_s"] <= 1.5 * beat + 1 for w in workers)


def _summary(engine: Any) -> dict[str, Any]:
    """Everything the overview shows, in a few pipelined round trips (also served as JSON)."""
    queues = engine.queues.stats()
    workers = engine.workers.list()
    return {
        "queues": queues,
        "workers": workers,
        "workers_alive": sum(1 for w in workers if w["alive"]),
        "leader": (leader := engine.workers.leader()),
        "leader_beating": _leader_beating(engine, leader, workers),
        "dlq_total": engine.dlq.count(),
        "scheduled_total": engine.schedule.count(),
        "totals": {
            "waiting": sum(q["waiting"] for q in queues),
            "pending": sum(q["pending"] for q in queues),
            "finished_last_minute": sum(q["finished_last_minute"] for q in queues),
        },
    }


# -- pages ------------------------------------------------------------------------------------
@console_page
def overview(request: HttpRequest) -> HttpResponse:
    context = _summary(get_engine())
    context["h"] = history_context(range_of(request), view="overview")
    return _render(request, "overview.html", context, nav="overview")


@require_GET
def state(request: HttpRequest) -> JsonResponse:
    """The overview's numbers as JSON: what the live page re-derives after a reconnect."""
    if not can_view_console(request.user):
        return JsonResponse({"error": {"code": "AUTHENTICATION_REQUIRED", "message": "log in first"}}, status=403)
    try:
        with redis_trouble():
            data = _summary(get_engine())
    except RedisTrouble as exc:
        return JsonResponse(error_body(exc, getattr(request, "request_id", ""), state=True), status=exc.http_status)
    return JsonResponse(data)


@console_page
def queue(request: HttpRequest, name: str) -> HttpResponse:
    form = forms.CursorForm(request.GET)
    if not form.is_valid():
        return _bad_filters(request, form, "overview")
    engine = get_engine()
    stats = engine.queues.get(name)
    page = engine.queues.waiting(name, after=form.cleaned_data["cursor"] or None, limit=PAGE)
    return _render(request, "queue.html", {"queue": stats, "page": page, "limits": engine.limits.get(name),
                                           "cursor": form.cleaned_data["cursor"],
                                           "max_depth": engine.config.max_queue_depth,
                                           "h": history_context(range_of(request), view="queue", queue=name)},
                   nav="overview")


@console_page
def purge_confirm(request: HttpRequest, name: str) -> HttpResponse:
    stats = get_engine().queues.get(name)
    return _render(request, "purge_confirm.html", {"queue": stats}, nav="overview")


@console_page
def tasks(request: HttpRequest) -> HttpResponse:
    form = forms.TaskFilterForm(request.GET)
    if not form.is_valid():
        return _bad_filters(request, form, "tasks")
    data = form.cleaned_data
    task_id = data["id"].strip()
    if task_id and not ID_PREFIX_RE.fullmatch(task_id) or is_task_id(task_id):
        # A whole id (or anything that cannot start one) goes to its page, as before.
        try:
            return redirect("dtq_dashboard:task", task_id=task_id)
        except NoReverseMatch:  # a "/" cannot be in a task id, nor in the URL made of one
            raise TaskNotFound(f"task {task_id!r} not found", task_id=task_id) from None
    page = get_engine().tasks.list(queue=data["queue"] or None, status=data["status"] or None,
                                   type=data["type"] or None, periodic_name=data["periodic_name"] or None,
                                   id_prefix=task_id or None, text=data["q"] or None,
                                   created_after=data["after"] or None, created_before=data["before"] or None,
                                   cursor=data["cursor"] or None, limit=PAGE)
    return _render(request, "tasks.html", {"form": form, "page": page, "filters": _query(data, "cursor")},
                   nav="tasks")


@console_page
def running(request: HttpRequest) -> HttpResponse:
    queue = request.GET.get("queue") or None
    if queue is not None and len(queue) > 64:
        raise ValidationError("queue must be at most 64 characters", field="queue")
    return _render(request, "running.html", {"running": get_engine().running.list(queue=queue), "queue": queue},
                   nav="tasks")


PRIORITY_CHOICES = ("high", "normal", "low")


def _enqueue_form(request: HttpRequest, values: dict[str, str], error: str = "", status: int = 200) -> HttpResponse:
    types = sorted(get_engine().tasks.served_types())
    return _render(request, "enqueue.html", {"types": types, "values": values, "error": error,
                                             "priorities": PRIORITY_CHOICES}, nav="tasks", status=status)


@console_page
def enqueue_form(request: HttpRequest) -> HttpResponse:
    return _enqueue_form(request, {"queue": "default", "priority": "normal", "payload": "{}"})


def _tasks_url(*_: Any) -> str:
    return reverse("dtq_dashboard:tasks")


@console_action("enqueue_task", default_next=_tasks_url)
def enqueue(request: HttpRequest, actor: Actor, back: str) -> HttpResponse:
    values = {name: request.POST.get(name, "") for name in ("type", "queue", "priority", "payload")}
    text = values["payload"] or "{}"
    if nested_deeper_than(text, MAX_JSON_DEPTH):  # checked first: json.loads would exhaust the stack
        return _enqueue_form(request, values, f"The payload nests arrays and objects more than {MAX_JSON_DEPTH} "
                                              "levels deep.", status=400)
    try:
        payload = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: not for text the check let through
        return _enqueue_form(request, values, f"The payload is not JSON: {exc}", status=400)
    try:
        enqueued = get_engine().tasks.enqueue_as(actor, values["type"].strip(), payload,
                                                 queue=values["queue"].strip() or "default",
                                                 priority=values["priority"] or "normal")
    except (ValidationError, QueueFull, QueueLimitReached, TaskRefused) as exc:
        return _enqueue_form(request, values, exc.message, status=exc.http_status)
    messages.success(request, f"Enqueued task {enqueued.id} ({values['type'].strip()} on "
                              f"{values['queue'].strip() or 'default'}).")
    return redirect("dtq_dashboard:task", task_id=enqueued.id)


@console_page
def task(request: HttpRequest, task_id: str) -> HttpResponse:
    record = get_engine().tasks.get(task_id)
    return _render(request, "task.html", {
        "task": record,
        "payload_json": _pretty(record.get("payload"), f"GET /api/v1/tasks/{task_id}"),
        "has_result": "result" in record,
        "result_json": _pretty(record.get("result"), f"GET /api/v1/tasks/{task_id}"),
        "timeline": task_timeline(record),
        "terminal": record.get("status") in TERMINAL,
    }, nav="tasks")


@console_page
def dlq(request: HttpRequest) -> HttpResponse:
    form = forms.DlqFilterForm(request.GET)
    if not form.is_valid():
        return _bad_filters(request, form, "dlq")
    engine = get_engine()
    filters = form.filters()
    page = engine.dlq.list(**filters, cursor=form.cleaned_data["cursor"] or None, limit=PAGE)
    groups = engine.dlq.groups(queue=filters["queue"], type=filters["type"])
    for group in groups["groups"]:
        group["select"] = _group_query(group, filters["queue"])
    return _render(request, "dlq.html", {
        "form": form, "page": page, "groups": groups, "filters": filters, "dlq_total": engine.dlq.count(),
        "dlq_trimmed": engine.dlq.trimmed(), "dlq_maxlen": engine.config.dlq_maxlen,
        "filtered": _dlq_filtered(filters), "query": _dlq_query(filters),
        "cursor": form.cleaned_data["cursor"], "queue_names": engine.queues.names(),
    }, nav="dlq")


@console_page
def dlq_confirm(request: HttpRequest) -> HttpResponse:
    """Preview how many dead letters 'Retry/Discard all matching' will touch, then confirm."""
    action = request.GET.get("action", "")
    form = forms.DlqFilterForm(request.GET)
    if action not in ("retry", "discard") or not form.is_valid():
        return _render(request, "error.html", {"title": "Bad request",
                                               "detail": "action must be retry or discard"
                                               if form.is_valid() else form.first_error()},
                       nav="dlq", status=400)
    filters = form.filters()
    engine = get_engine()
    # Queue, type and group are matched in Redis without reading payloads: count further back for
    # them, so the preview is exact for a DLQ of the default cap (text searches stay at the page
    # budget).
    examined = SCAN_BUDGET if filters.get("q") else CONFIRM_BUDGET
    preview = engine.dlq.match_count(**filters, budget=examined)
    return _render(request, "dlq_confirm.html", {"action": action, "filters": filters, "count": preview["count"],
                                                 "exact": preview["exact"], "examined": examined,
                                                 "dlq_total": engine.dlq.count(),
                                                 "everything": not _dlq_filtered(filters)}, nav="dlq")


def _group_query(group: dict[str, Any], queue: str | None) -> str:
    """The filter of one error group exactly (type, error class, message), for its Show, Retry group… and
    Discard group… links. Not a text filter: that would also match the messages holding this one
    ("boom" in "kaboom") and payloads. It keeps the page's queue filter: a group seen in one queue
    acts on that queue only."""
    exact = {"type": group["type"], "error_class": group["error_class"], "message": group["message"]}
    return urlencode({"queue": queue, **exact} if queue else exact)


def _dlq_filtered(filters: dict[str, str | None]) -> bool:
    # None is no filter: a group's error class or message may be exactly "" (and still filter).
    return any(v is not None for v in filters.values())


def _dlq_query(filters: dict[str, str | None]) -> str:
    """The filters as a query string, for the pager's links."""
    return urlencode({k: v for k, v in filters.items() if v is not None})


@console_page
def schedule(request: HttpRequest) -> HttpResponse:
    form = forms.CursorForm(request.GET)
    if not form.is_valid():
        return _bad_filters(request, form, "schedule")
    engine = get_engine()
    page = engine.schedule.list(cursor=form.cleaned_data["cursor"] or None, limit=PAGE)
    return _render(request, "schedule.html", {"page": page, "total": engine.schedule.count(),
                                              "cursor": form.cleaned_data["cursor"]}, nav="schedule")


@console_page
def workers(request: HttpRequest) -> HttpResponse:
    engine = get_engine()
    rows = engine.workers.list()
    leader = engine.workers.leader()
    return _render(request, "workers.html", {"workers": rows, "leader": leader,
                                             "leader_beating": _leader_beating(engine, leader, rows),
                                             "alive": sum(1 for w in rows if w["alive"])}, nav="workers")


@console_page
def audit(request: HttpRequest) -> HttpResponse:
    form = forms.AuditFilterForm(request.GET)
    if not form.is_valid():
        return _bad_filters(request, form, "audit")
    data = form.cleaned_data
    engine = get_engine()
    page = engine.audit.list(action=data["action"] or None, actor=data["actor"] or None,
                             source=data["source"] or None, cursor=data["cursor"] or None, limit=PAGE)
    return _render(request, "audit.html", {"form": form, "page": page, "query": _query(data, "cursor"),
                                           "cursor": data["cursor"], "open_ops": engine.audit.open_count()},
                   nav="audit")


@console_page
def periodic(request: HttpRequest) -> HttpResponse:
    rows = get_engine().periodic.list()
    return _render(request, "periodic.html", {"schedules": rows, "paused": sum(1 for p in rows if p["paused"])},
                   nav="periodic")


@console_page
def periodic_detail(request: HttpRequest, name: str) -> HttpResponse:
    shown = get_engine().periodic.get(name)
    payload_json = _pretty(shown.get("payload"), f"GET /api/v1/periodic/{name}")
    return _render(request, "periodic_detail.html", {"p": shown, "payload_json": payload_json},
                   nav="periodic")


@console_page
def periodic_delete_confirm(request: HttpRequest, name: str) -> HttpResponse:
    return _render(request, "periodic_delete_confirm.html", {"p": get_engine().periodic.get(name)}, nav="periodic")


WORKFLOW_STATUSES = ("RUNNING", "SUCCEEDED", "FAILED", "CANCELLED")
STEPS_LISTED = 500  # a workflow page's table of steps; a bigger one is read through the API


@console_page
def workflows(request: HttpRequest) -> HttpResponse:
    form = forms.WorkflowFilterForm(request.GET)
    if not form.is_valid():
        return _bad_filters(request, form, "workflows")
    data = form.cleaned_data
    rows, cursor = get_engine().workflows.list(status=data["status"] or None, cursor=data["cursor"] or None,
                                               limit=PAGE)
    return _render(request, "workflows.html", {"form": form, "rows": rows, "next_cursor": cursor,
                                               "filters": _query(data, "cursor")}, nav="workflows")


@console_page
def workflow(request: HttpRequest, workflow_id: str) -> HttpResponse:
    # Only the steps the table lists are resolved: a wide workflow's others would cost seconds.
    shown = get_engine().workflows.get(workflow_id, steps_limit=STEPS_LISTED)
    steps, total = shown["steps"], shown["steps_total"]
    return _render(request, "workflow.html", {
        "wf": shown, "graph": workflow_svg(steps, _task_url) if total <= MAX_DRAWN else None,
        "max_drawn": MAX_DRAWN, "steps": steps, "steps_cut": max(0, total - len(steps)),
        "percent": round(100 * shown["progress"]["fraction"]),
    }, nav="workflows")


# -- actions ----------------------------------------------------------------------------------
def _queue_url(name: str) -> str:
    return reverse("dtq_dashboard:queue", args=[name])


def _set_paused(request: HttpRequest, actor: Actor, back: str, name: str, paused: bool) -> HttpResponse:
    queues = get_engine().queues
    if (queues.pause if paused else queues.resume)(name, actor):
        done = "Paused queue {}: workers stop starting its tasks" if paused else "Resumed queue {}"
        messages.success(request, done.format(name) + " (1 queue changed).")
    else:
        messages.info(request, f"Queue {name} was {'already' if paused else 'not'} paused (0 queues changed).")
    return redirect(back)


@console_action("pause_queue", default_next=_queue_url)
def pause(request: HttpRequest, actor: Actor, back: str, name: str) -> HttpResponse:
    return _set_paused(request, actor, back, name, True)


@console_action("pause_queue", default_next=_queue_url)
def resume(request: HttpRequest, actor: Actor, back: str, name: str) -> HttpResponse:
    return _set_paused(request, actor, back, name, False)


@console_action("purge_queue", default_next=_queue_url)
def purge(request: HttpRequest, actor: Actor, back: str, name: str) -> HttpResponse:
    if request.POST.get("confirm") != "yes":
        # No JavaScript confirm dialog happened: show the confirmation page instead of acting.
        return redirect("dtq_dashboard:purge-confirm", name=name)
    count = get_engine().queues.purge(name, actor)
    messages.success(request, f"Purged queue {name}: cancelled {count:,} waiting task{_s(count)}.")
    return redirect(_queue_url(name))


@console_action("purge_queue", default_next=_queue_url)
def delete_queue(request: HttpRequest, actor: Actor, back: str, name: str) -> HttpResponse:
    get_engine().queues.delete(name, actor)  # refused (a message, back to the page) unless empty
    messages.success(request, f"Deleted queue {name} (it was empty).")
    return redirect("dtq_dashboard:overview")


@console_action("change_queue_limits", default_next=_queue_url)
def set_limits(request: HttpRequest, actor: Actor, back: str, name: str) -> HttpResponse:
    engine = get_engine()
    engine.queues.layout(name)  # QueueNotFound (a message): the console changes queues that exist
    if request.POST.get("clear") == "yes":
        engine.limits.clear(name, actor=actor)
        messages.success(request, f"Cleared the limits of queue {name}: its tasks start as fast as workers take them.")
        return redirect(back)
    form = forms.LimitsForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Nothing was changed: {form.first_error()}.")
        return redirect(back)
    shown = engine.limits.set(name, form.limits(), actor=actor, source="api")
    messages.success(request, f"Set the limits of queue {name}: {_limits_text(shown)}.")
    return redirect(back)


def _limits_text(shown: dict[str, Any]) -> str:
    parts = [f"concurrency {shown['concurrency']}" if shown["concurrency"] is not None else "",
             f"rate {shown['rate']['limit']} per {shown['rate']['period_s']:g} s" if shown["rate"] else "",
             f"group concurrency {shown['group_concurrency']}" if shown["group_concurrency"] is not None else "",
             f"group rate {shown['group_rate']['limit']} per {shown['group_rate']['period_s']:g} s"
             if shown["group_rate"] else ""]
    return ", ".join(p for p in parts if p) or "none (no limits)"


def _task_url(task_id: str) -> str:
    return reverse("dtq_dashboard:task", args=[task_id])


@console_action("cancel_task", default_next=_task_url)
def cancel(request: HttpRequest, actor: Actor, back: str, task_id: str) -> HttpResponse:
    result = get_engine().tasks.cancel(task_id, actor)
    if result.cancelled:
        messages.success(request, f"Cancelled task {task_id} (1 task).")
    else:
        messages.success(request, f"Cancellation of running task {task_id} requested; "
                                  "its worker stops the handler shortly (1 task).")
    return redirect(back)


def _schedule_url(*_: Any, **__: Any) -> str:
    return reverse("dtq_dashboard:schedule")


@console_action("cancel_task", default_next=_schedule_url)
def run_now(request: HttpRequest, actor: Actor, back: str, task_id: str) -> HttpResponse:
    get_engine().tasks.run_now(task_id, actor)  # refusals (not scheduled, ended): a message, back
    messages.success(request, f"Task {task_id} is due now: the scheduler queues it in its next round.")
    return redirect(back)


@console_action("cancel_task", default_next=_schedule_url)
def delete_task(request: HttpRequest, actor: Actor, back: str, task_id: str) -> HttpResponse:
    get_engine().tasks.delete(task_id, actor)
    messages.success(request, f"Deleted task {task_id} (cancelled first if it was waiting).")
    return redirect(back)


def _workflow_url(workflow_id: str) -> str:
    return reverse("dtq_dashboard:workflow", args=[workflow_id])


@console_action("cancel_task", default_next=_workflow_url)
def cancel_workflow(request: HttpRequest, actor: Actor, back: str, workflow_id: str) -> HttpResponse:
    shown = get_engine().workflows.cancel(workflow_id, actor)
    if shown["status"] == "FAILED":  # it keeps how it ended; what its other branches had left stops
        messages.success(request, f"Cancelled what was left of failed workflow {workflow_id}: its steps not "
                                  "finished are CANCELLED.")
    else:
        messages.success(request, f"Cancelled workflow {workflow_id}: {shown['steps_total']} step"
                                  f"{_s(shown['steps_total'])}, those not finished are CANCELLED.")
    return redirect(back)


def _dlq_url(*_: Any) -> str:
    return reverse("dtq_dashboard:dlq")


def _dlq_ids_action(request: HttpRequest, actor: Actor, back: str, *, retry: bool) -> HttpResponse:
    form = forms.DlqIdsForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Nothing was changed: {form.first_error()}.")
        return redirect(back)
    selection = DlqSelection(ids=tuple(form.ids))
    count, kept = _act_on_dead_letters(selection, actor, retry=retry)
    verb = "Retried" if retry else "Discarded"
    gone = len(form.ids) - count - kept
    note = f" ({gone:,} already gone)" if gone else ""
    messages.success(request, f"{verb} {count:,} of {len(form.ids):,} selected dead letter{_s(len(form.ids))}{note}."
                     + _kept_note(kept))
    return redirect(back)


def _act_on_dead_letters(selection: DlqSelection, actor: Actor, *, retry: bool) -> tuple[int, int]:
    """Retry or discard; return how many were changed and how many a retry left in the DLQ."""
    dlq = get_engine().dlq
    if not retry:
        return dlq.discard(selection, actor), 0
    outcome = dlq.retry_outcome(selection, actor)
    return outcome.retried, outcome.kept


def _kept_note(kept: int) -> str:
    if not kept:
        return ""
    return (f" {kept:,} stay{'s' if kept == 1 else ''} in the DLQ: {'its' if kept == 1 else 'their'} task record "
            f"expired, so only discarding removes {'it' if kept == 1 else 'them'}.")


@console_action("retry_deadletter", default_next=_dlq_url)
def dlq_retry(request: HttpRequest, actor: Actor, back: str) -> HttpResponse:
    return _dlq_ids_action(request, actor, back, retry=True)


@console_action("discard_deadletter", default_next=_dlq_url)
def dlq_discard(request: HttpRequest, actor: Actor, back: str) -> HttpResponse:
    return _dlq_ids_action(request, actor, back, retry=False)


def _dlq_matching_action(request: HttpRequest, actor: Actor, back: str, *, retry: bool) -> HttpResponse:
    form = forms.DlqMatchingForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Nothing was changed: {form.first_error()}.")
        return redirect(back)
    filters = form.filters()
    if form.cleaned_data["confirm"] != "yes":
        query = f"action={'retry' if retry else 'discard'}&{_dlq_query(filters)}"
        return redirect(f"{reverse('dtq_dashboard:dlq-confirm')}?{query}")
    # all only when no filter is given: a group whose error class and message are both empty
    # is still that group, not everything.
    selection = DlqSelection(queue=filters["queue"], type=filters["type"], q=filters["q"],
                             error_class=filters["error_class"], message=filters["message"],
                             all=not _dlq_filtered(filters))
    count, kept = _act_on_dead_letters(selection, actor, retry=retry)
    verb = "Retried" if retry else "Discarded"
    what = ", ".join(f"{k}={v!r}" if k in ("error_class", "message") else f"{k}={v}"
                     for k, v in filters.items() if v is not None) or "everything in the DLQ"
    messages.success(request, f"{verb} {count:,} dead letter{_s(count)} matching {what}.{_kept_note(kept)}")
    return redirect(back)


@console_action("retry_deadletter", default_next=_dlq_url)
def dlq_retry_matching(request: HttpRequest, actor: Actor, back: str) -> HttpResponse:
    return _dlq_matching_action(request, actor, back, retry=True)


@console_action("discard_deadletter", default_next=_dlq_url)
def dlq_discard_matching(request: HttpRequest, actor: Actor, back: str) -> HttpResponse:
    return _dlq_matching_action(request, actor, back, retry=False)


def _periodic_url(name: str) -> str:
    return reverse("dtq_dashboard:periodic-detail", args=[name])


@console_action("operate_periodic", default_next=_periodic_url)
def periodic_pause(request: HttpRequest, actor: Actor, back: str, name: str) -> HttpResponse:
    get_engine().periodic.pause(name, actor=actor)
    messages.success(request, f"Paused periodic task {name}: it fires nothing until resumed.")
    return redirect(back)


@console_action("operate_periodic", default_next=_periodic_url)
def periodic_resume(request: HttpRequest, actor: Actor, back: str, name: str) -> HttpResponse:
    shown = get_engine().periodic.resume(name, actor=actor)
    missed = "fires one task now for the ticks missed while paused, if any (misfire run_once)" \
        if shown.get("misfire") == "run_once" else "skips the ticks missed while paused (misfire skip)"
    messages.success(request, f"Resumed periodic task {name}: it {missed}.")
    return redirect(back)


@console_action("operate_periodic", default_next=_periodic_url)
def periodic_trigger(request: HttpRequest, actor: Actor, back: str, name: str) -> HttpResponse:
    fired = get_engine().periodic.trigger(name, actor=actor)
    messages.success(request, f"Triggered periodic task {name}: task {fired['task_id']} submitted "
                              "(the schedule's next tick is unchanged).")
    return redirect(back)


@console_action("change_periodic", default_next=_periodic_url)
def periodic_delete(request: HttpRequest, actor: Actor, back: str, name: str) -> HttpResponse:
    if request.POST.get("confirm") != "yes":
        # No JavaScript confirm dialog happened: show the confirmation page instead of acting.
        return redirect("dtq_dashboard:periodic-delete-confirm", name=name)
    get_engine().periodic.delete(name, actor=actor)
    messages.success(request, f"Deleted periodic task {name}: it fires no more (tasks it fired are kept).")
    return redirect("dtq_dashboard:periodic")


# -- helpers ----------------------------------------------------------------------------------
# How much of a payload or result a page prints: indenting adds two spaces per level of nesting
# to every line below it, so a few hundred KB of nested JSON would print as tens of MB.
PRETTY_MAX_CHARS = 256 * 1024
_INDENTED = json.JSONEncoder(indent=2, ensure_ascii=False, sort_keys=True).iterencode
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, sort_keys=True).encode


def _pretty(value: Any, whole_at: str) -> str:
    """The value as indented JSON while that fits in PRETTY_MAX_CHARS, else as compact JSON cut
    to it, with a note saying where the whole of it is (whole_at, an API request)."""
    shown: list[str] = []
    size = 0
    try:
        for chunk in _INDENTED(value):  # stopped at the budget: the rest is never built
            size += len(chunk)
            if size > PRETTY_MAX_CHARS:
                break
            shown.append(chunk)
        else:
            return "".join(shown)
        compact = _COMPACT(value)
    except RecursionError:  # a result (unchecked) or a payload stored before submit limited nesting
        return f"(nested too deeply to show here: the whole value is in the API, {whole_at})"
    if len(compact) <= PRETTY_MAX_CHARS:
        return compact
    return f"{compact[:PRETTY_MAX_CHARS]}\n… truncated: the whole value is in the API, {whole_at}"


def _query(data: dict[str, Any], *drop: str) -> str:
    return urlencode({k: v for k, v in data.items() if v and k not in drop})


def _s(n: int) -> str:
    return "" if n == 1 else "s"

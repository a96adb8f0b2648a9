"""Console URLs: pages are GET, actions are POST-only (GET on an action URL is 405)."""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import path

from . import history_views, views, worker_views

app_name = "dtq_dashboard"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("console/state.json", views.state, name="state"),
    path("queues/<str:name>/", views.queue, name="queue"),
    path("queues/<str:name>/pause", views.pause, name="pause"),
    path("queues/<str:name>/resume", views.resume, name="resume"),
    path("queues/<str:name>/purge", views.purge, name="purge"),
    path("queues/<str:name>/purge/confirm", views.purge_confirm, name="purge-confirm"),
    path("queues/<str:name>/delete", views.delete_queue, name="delete-queue"),
    path("queues/<str:name>/limits", views.set_limits, name="set-limits"),
    path("tasks/", views.tasks, name="tasks"),
    path("tasks/new/", views.enqueue_form, name="enqueue-form"),
    path("tasks/running/", views.running, name="running"),
    path("tasks/new/submit", views.enqueue, name="enqueue"),
    path("tasks/<str:task_id>/", views.task, name="task"),
    path("tasks/<str:task_id>/cancel", views.cancel, name="cancel"),
    path("tasks/<str:task_id>/run-now", views.run_now, name="run-now"),
    path("tasks/<str:task_id>/delete", views.delete_task, name="delete-task"),
    path("dlq/", views.dlq, name="dlq"),
    path("dlq/retry", views.dlq_retry, name="dlq-retry"),
    path("dlq/discard", views.dlq_discard, name="dlq-discard"),
    path("dlq/matching/confirm", views.dlq_confirm, name="dlq-confirm"),
    path("dlq/matching/retry", views.dlq_retry_matching, name="dlq-retry-matching"),
    path("dlq/matching/discard", views.dlq_discard_matching, name="dlq-discard-matching"),
    path("schedule/", views.schedule, name="schedule"),
    path("periodic/", views.periodic, name="periodic"),
    path("periodic/<str:name>/", views.periodic_detail, name="periodic-detail"),
    path("periodic/<str:name>/pause", views.periodic_pause, name="periodic-pause"),
    path("periodic/<str:name>/resume", views.periodic_resume, name="periodic-resume"),
    path("periodic/<str:name>/trigger", views.periodic_trigger, name="periodic-trigger"),
    path("periodic/<str:name>/delete", views.periodic_delete, name="periodic-delete"),
    path("periodic/<str:name>/delete/confirm", views.periodic_delete_confirm, name="periodic-delete-confirm"),
    path("workflows/", views.workflows, name="workflows"),
    path("workflows/<str:workflow_id>/", views.workflow, name="workflow"),
    path("workflows/<str:workflow_id>/cancel", views.cancel_workflow, name="cancel-workflow"),
    path("types/", history_views.types, name="types"),
    path("types/<str:name>/", history_views.task_type, name="type"),
    path("history/fragment", history_views.fragment, name="history-fragment"),
    path("workers/", views.workers, name="workers"),
    # A worker id may hold "/" (runworker_dtq --name k8s/pod-1): the page ends in "/" and the
    # actions do not, so "workers/a/quiet" is always worker a's action, "workers/a/quiet/" a page.
    path("workers/<path:worker_id>/", worker_views.worker, name="worker"),
    path("workers/<path:worker_id>/quiet", worker_views.quiet, name="worker-quiet"),
    path("workers/<path:worker_id>/stop", worker_views.stop, name="worker-stop"),
    path("audit/", views.audit, name="audit"),
    # The console's own template and landing page: a project's LOGIN_URL, LOGIN_REDIRECT_URL and
    # registration/login.html (if any) are its own, and may not be the console's.
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True,
                                                template_name="dtq_dashboard/login.html",
                                                next_page="dtq_dashboard:overview"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(next_page="dtq_dashboard:overview"), name="logout"),
]

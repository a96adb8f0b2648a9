from __future__ import annotations

from django.urls import path, re_path

from . import schema, views  # noqa: F401  (schema registers the X-API-Key OpenAPI extension)
from .base import DocsView, SchemaView
from .index import api_index
from .stats import StatsView
from .workers import WorkerDetailView, WorkerQuietView, WorkerStopView
from .workflows import WorkflowCancelView, WorkflowDetailView, WorkflowListView

V1 = "api/v1/"

urlpatterns = [
    path(V1, api_index, name="api-index"),
    path(V1.rstrip("/"), api_index),
    path(V1 + "tasks", views.TaskListView.as_view(), name="task-list"),
    path(V1 + "tasks/batch", views.TaskBatchView.as_view(), name="task-batch"),
    path(V1 + "tasks/running", views.RunningTasksView.as_view(), name="task-running"),
    path(V1 + "tasks/<str:task_id>", views.TaskDetailView.as_view(), name="task-detail"),
    path(V1 + "tasks/<str:task_id>/cancel", views.TaskCancelView.as_view(), name="task-cancel"),
    path(V1 + "tasks/<str:task_id>/run-now", views.TaskRunNowView.as_view(), name="task-run-now"),
    path(V1 + "queues", views.QueueListView.as_view(), name="queue-list"),
    path(V1 + "queues/<str:queue>", views.QueueDetailView.as_view(), name="queue-detail"),
    path(V1 + "queues/<str:queue>/limits", views.QueueLimitsView.as_view(), name="queue-limits"),
    path(V1 + "queues/<str:queue>/pause", views.QueuePauseView.as_view(), name="queue-pause"),
    path(V1 + "queues/<str:queue>/resume", views.QueueResumeView.as_view(), name="queue-resume"),
    path(V1 + "queues/<str:queue>/purge", views.QueuePurgeView.as_view(), name="queue-purge"),
    path(V1 + "queues/<str:queue>/delete", views.QueueDeleteView.as_view(), name="queue-delete"),
    path(V1 + "dlq", views.DlqListView.as_view(), name="dlq-list"),
    path(V1 + "dlq/retry", views.DlqBulkRetryView.as_view(), name="dlq-retry"),
    path(V1 + "dlq/discard", views.DlqBulkDiscardView.as_view(), name="dlq-discard"),
    path(V1 + "dlq/<str:entry_id>", views.DlqEntryView.as_view(), name="dlq-entry"),
    path(V1 + "dlq/<str:entry_id>/retry", views.DlqEntryRetryView.as_view(), name="dlq-entry-retry"),
    path(V1 + "dlq/<str:entry_id>/discard", views.DlqEntryDiscardView.as_view(),
         name="dlq-entry-discard"),
    path(V1 + "audit", views.AuditListView.as_view(), name="audit-list"),
    path(V1 + "workers", views.WorkerListView.as_view(), name="worker-list"),
    # A worker id may hold "/" (runworker_dtq --name k8s/pod-1), so the id is a path and the
    # actions come first: "workers/a/quiet" is worker a's quiet, not a worker named "a/quiet".
    path(V1 + "workers/<path:worker_id>/quiet", WorkerQuietView.as_view(), name="worker-quiet"),
    path(V1 + "workers/<path:worker_id>/stop", WorkerStopView.as_view(), name="worker-stop"),
    path(V1 + "workers/<path:worker_id>", WorkerDetailView.as_view(), name="worker-detail"),
    path(V1 + "stats", StatsView.as_view(), name="stats"),
    path(V1 + "schedule", views.ScheduleListView.as_view(), name="schedule-list"),
    path(V1 + "periodic", views.PeriodicListView.as_view(), name="periodic-list"),
    path(V1 + "periodic/<str:name>", views.PeriodicDetailView.as_view(), name="periodic-detail"),
    path(V1 + "periodic/<str:name>/pause", views.PeriodicPauseView.as_view(), name="periodic-pause"),
    path(V1 + "periodic/<str:name>/resume", views.PeriodicResumeView.as_view(), name="periodic-resume"),
    path(V1 + "periodic/<str:name>/trigger", views.PeriodicTriggerView.as_view(), name="periodic-trigger"),
    path(V1 + "workflows", WorkflowListView.as_view(), name="workflow-list"),
    path(V1 + "workflows/<str:workflow_id>", WorkflowDetailView.as_view(), name="workflow-detail"),
    path(V1 + "workflows/<str:workflow_id>/cancel", WorkflowCancelView.as_view(), name="workflow-cancel"),
    path("api/schema/", SchemaView.as_view(), name="schema"),
    path("api/schema", SchemaView.as_view()),
    path("api/docs/", DocsView.as_view(), name="api-docs"),
    path("health", views.health, name="health"),
    path("ready", views.ready, name="ready"),
    re_path(r"^api/", views.api_not_found, name="api-not-found"),
]

from django.urls import path

from . import views

urlpatterns = [
    path("api/v1/tasks", views.TaskListView.as_view(), name="task-list"),
    path("api/v1/tasks/<str:task_id>", views.TaskDetailView.as_view(), name="task-detail"),
    path("health", views.health, name="health"),
    path("ready", views.ready, name="ready"),
]

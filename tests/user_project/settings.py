"""A project of a user's own, set up only as docs/django-tasks.md says: no settings.DTQ, so dtq
reads its DTQ_* variables from the environment. Run with `python -m django ... --settings`."""

SECRET_KEY = "user-project-test-key"
USE_TZ = True
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
INSTALLED_APPS = [
    "django_tasks",  # Django 5.2: the backport's checks of TASKS
    "dtq_core",
    "dtq_worker",  # runworker_dtq, dlq, queue, task
]
TASKS = {"default": {"BACKEND": "dtq_core.django_tasks.DtqBackend", "QUEUES": []}}

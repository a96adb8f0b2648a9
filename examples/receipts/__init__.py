"""Example app: Django's Tasks framework on dtq (docs/django-tasks.md walks through it)."""

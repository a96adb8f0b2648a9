"""Dashboard fixtures: users for every permission level, and real dead letters made by a real worker."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

import dtq_tasks  # noqa: F401  (registers the built-in task types the worker runs)
from dtq_core.engine import Engine
from dtq_core.worker import Worker

PASSWORD = "correct horse battery staple"


def make_user(username: str, *, staff: bool = False, superuser: bool = False, perms: tuple[str, ...] = ()) -> User:
    if superuser:
        user = User.objects.create_superuser(username, f"{username}@example.com", PASSWORD)
    else:
        user = User.objects.create_user(username, f"{username}@example.com", PASSWORD, is_staff=staff)
    if perms:
        user.user_permissions.add(*Permission.objects.filter(content_type__app_label="dtq_dashboard",
                                                             codename__in=perms))
    return user


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    # The default PBKDF2 costs ~0.3 s per user; these tests make five users each.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def users(db: Any) -> dict[str, User]:
    return {
        "admin": make_user("admin", superuser=True),
        "operator": make_user("operator", staff=True, perms=("retry_deadletter", "discard_deadletter", "pause_queue",
                                                             "purge_queue", "cancel_task", "change_queue_limits")),
        "readonly_staff": make_user("readonly_staff", staff=True),
        "viewer": make_user("viewer"),
        # Holds every permission but is not staff: still refused.
        "nonstaff_with_perms": make_user("nonstaff_with_perms", perms=("retry_deadletter", "pause_queue",
                                                                       "purge_queue", "cancel_task",
                                                                       "discard_deadletter", "change_queue_limits")),
    }


@pytest.fixture
def login(users: dict[str, User]) -> Callable[[str], Client]:
    def as_user(name: str) -> Client:
        client = Client()
        client.force_login(users[name])
        return client

    return as_user


def run_burst(engine: Engine, *, queues: list[str] | None = None) -> None:
    """Drain these queues (default: every queue) with a real in-process worker (burst mode)."""
    asyncio.run(Worker(engine.config, queues=queues, burst=True, name="test-burst", concurrency=20).run())


@pytest.fixture
def dead_letters(live_engine: Engine) -> Callable[..., list[str]]:
    """Make real dead letters: enqueue failing tasks and let a real worker dead-letter them."""

    def make(n: int = 3, *, message: str = "boom", queue: str = "default", payload: Any = None) -> list[str]:
        ids = []
        for i in range(n):
            body = {"retryable": False, "message": message, "i": i}
            if payload is not None:
                body["extra"] = payload
            ids.append(live_engine.tasks.enqueue("dtq.fail", body, queue=queue).id)
        run_burst(live_engine)
        return [live_engine.tasks.get(task_id)["dlq_entry_id"] for task_id in ids]

    return make

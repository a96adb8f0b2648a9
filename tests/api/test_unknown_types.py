"""Submit refuses task types no worker serves (once workers have registered theirs), so anonymous
junk cannot fill the capped DLQ and evict real dead letters; a fresh install, the opt-out and
Django Tasks submissions are accepted as documented in docs/tasks.md."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

import dtq_core.django_tasks.runner  # noqa: F401  (this process's workers run Django tasks, as runworker_dtq's do)
import dtq_tasks
from dtq_core.config import ConfigError, DtqConfig, read_env
from dtq_core.engine import Engine
from dtq_core.errors import UnknownTaskType
from tests.conftest import WorkerProcess, wait_for

from .support import assert_error, drain, make_dead_letters


def registered(engine: Engine) -> frozenset[str]:
    return engine.tasks.served_types()


@pytest.mark.slow
def test_junk_types_are_refused_once_a_worker_registered_and_real_dead_letters_stay(
        api: APIClient, live_engine: Engine, start_worker: Callable[..., WorkerProcess], settings: Any) -> None:
    settings.DTQ = {**settings.DTQ, "DLQ_MAXLEN": 5}
    live_engine = Engine(dataclasses.replace(live_engine.config, dlq_maxlen=5))
    real = make_dead_letters(live_engine, 5, message="card declined")  # the DLQ is at its cap
    live_engine.client.delete(live_engine.keys.task_types())  # what the in-process worker registered
    worker = start_worker("--queues", "other", "--name", "w-types")
    # The worker process registers what it serves at start, the Django Tasks runner included.
    wait_for(lambda: "django.task" in registered(live_engine), timeout=60, message=worker.output)
    assert {"dtq.echo", "django.atask"} <= registered(live_engine)

    error = assert_error(api.post("/api/v1/tasks", {"type": "junk.0001"}, format="json"), 400, "UNKNOWN_TASK_TYPE")
    assert error["field"] == "type" and "junk.0001" in error["message"]
    batch = api.post("/api/v1/tasks/batch", {"tasks": [{"type": "dtq.echo"}, {"type": "junk.0002"}]},
                     format="json").json()["results"]
    assert batch[0]["status"] == "QUEUED" and batch[1]["error"]["code"] == "UNKNOWN_TASK_TYPE"
    with pytest.raises(UnknownTaskType):
        dtq_tasks.enqueue("junk.0003")
    for i in range(20):
        api.post("/api/v1/tasks", {"type": f"junk.{i:04d}", "queue": "other"}, format="json")
    drain(live_engine.config, queues=["other", "default"])
    # Nothing junk reached a worker: the five real dead letters are all still there.
    entries = live_engine.dlq.list(limit=50).items
    assert sorted(e["task_id"] for e in entries) == sorted(real)
    assert api.post("/api/v1/tasks", {"type": "dtq.echo"}, format="json").status_code == 201


def test_a_fresh_install_accepts_any_type_and_the_opt_out_keeps_accepting(live_engine: Engine) -> None:
    assert registered(live_engine) == frozenset()
    assert live_engine.tasks.enqueue("not.served.yet").status == "QUEUED"  # no worker has ever registered
    drain(live_engine.config, queues=["nothing"])  # a worker starts: its types are registered
    assert "dtq.echo" in registered(live_engine)
    with pytest.raises(UnknownTaskType):
        live_engine.tasks.enqueue("not.served.yet")
    open_engine = Engine(dataclasses.replace(live_engine.config, accept_unknown_types=True),
                         client=live_engine.client)
    assert open_engine.tasks.enqueue("not.served.yet").status == "QUEUED"


def test_django_tasks_submissions_are_accepted_while_a_django_capable_worker_is_registered(
        live_engine: Engine) -> None:
    drain(live_engine.config, queues=["nothing"])
    # DtqBackend records a task's import path as its type and the Django runner as its handler:
    # what a worker must serve is the handler.
    submission = live_engine.tasks.validate("myapp.tasks.send_invoice", {}, handler="django.task")
    assert submission.type == "myapp.tasks.send_invoice"
    with pytest.raises(UnknownTaskType):  # the same type from a plain submit is not served
        live_engine.tasks.validate("myapp.tasks.send_invoice", {})
    live_engine.client.hdel(live_engine.keys.task_types(), "django.task", "django.atask")
    fresh = Engine(live_engine.config, client=live_engine.client)  # no cached copy of the types
    with pytest.raises(UnknownTaskType):
        fresh.tasks.validate("myapp.tasks.send_invoice", {}, handler="django.task")


def test_a_type_no_worker_registered_for_the_retention_is_forgotten(live_engine: Engine) -> None:
    keys = live_engine.keys
    live_engine.client.hset(keys.task_types(), mapping={"old.gone": 1, "dtq.echo": 1})
    drain(live_engine.config, queues=["nothing"])
    types = registered(live_engine)
    assert "old.gone" not in types and "dtq.echo" in types


@pytest.mark.parametrize("raw", ["maybe", "2"])
def test_the_opt_out_setting_is_validated(raw: str) -> None:
    with pytest.raises(ConfigError, match="DTQ_ACCEPT_UNKNOWN_TYPES"):
        read_env({"DTQ_ACCEPT_UNKNOWN_TYPES": raw}.get)
    assert read_env({"DTQ_ACCEPT_UNKNOWN_TYPES": "true"}.get).accept_unknown_types is True
    assert DtqConfig().accept_unknown_types is False
    with pytest.raises(ConfigError, match="DTQ_ACCEPT_UNKNOWN_TYPES"):
        DtqConfig.from_mapping({"ACCEPT_UNKNOWN_TYPES": "yes"})

"""Encrypted payloads and results (issue 25): Redis never holds the plaintext (read with the real
redis-cli), the handler gets it, the API shows it to a process with the key and "encrypted" to one
without, keys rotate (the first encrypts, all decrypt), a lost key dead-letters with a readable
error, a workflow's encrypted results reach the next step decrypted."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

import pytest
from cryptography.fernet import Fernet
from rest_framework.test import APIClient

from dtq_core.config import ConfigError, DtqConfig
from dtq_core.engine import Engine

from ..conftest import WorkerProcess, wait_for
from ..failure.support import FAST
from ..redis_server import RedisServer

KEY_A, KEY_B = Fernet.generate_key().decode(), Fernet.generate_key().decode()
TYPES = "enc.secret,enc.asecret,enc.parent"
SECRET = {"card": "4111-1111-1111-1111", "name": "Ada Lovelace"}


def worker_env(keys: str) -> dict[str, Any]:
    return {**FAST, "DTQ_TASK_MODULES": "tests.integrations.mw", "DTQ_ENCRYPTION_KEYS": keys,
            "DTQ_ENCRYPT_TYPES": TYPES}


def encrypted_engine(settings: Any, keys: list[str]) -> Engine:
    settings.DTQ = {**settings.DTQ, "ENCRYPTION_KEYS": keys, "ENCRYPT_TYPES": TYPES.split(","),
                    "ACCEPT_UNKNOWN_TYPES": True}
    from dtq_core.conf import get_engine
    return get_engine()


def redis_cli(server: RedisServer, *args: str) -> str:
    return subprocess.run(["redis-cli", "-p", str(server.port), *args], capture_output=True, text=True, check=True,
                          timeout=10).stdout


def test_redis_holds_no_plaintext_and_the_handler_and_api_see_it(
        settings: Any, live_engine: Engine, redis_server: RedisServer,
        start_worker: Callable[..., WorkerProcess]) -> None:
    engine = encrypted_engine(settings, [KEY_A])
    ids = [engine.tasks.enqueue(t, SECRET, queue="enc").id for t in ("enc.secret", "enc.asecret")]
    plain = engine.tasks.enqueue("dtq.echo", {"note": "not secret"}, queue="enc").id
    for task_id in ids:
        stored = redis_cli(redis_server, "HGET", engine.keys.task(task_id), "payload")
        assert "4111" not in stored and "Ada" not in stored and stored.startswith('"dtq-encrypted:gAAAA'), stored
    assert "not secret" in redis_cli(redis_server, "HGET", engine.keys.task(plain), "payload")
    queued = APIClient().get(f"/api/v1/tasks/{ids[0]}").json()
    assert queued["payload"] == SECRET and queued["encrypted"] is True
    worker = start_worker("--name", "enc", "--queues", "enc", **worker_env(KEY_A))
    for task_id in [*ids, plain]:
        wait_for(lambda t=task_id: engine.tasks.get(t)["status"] == "SUCCEEDED", timeout=20, message=worker.output)
    for task_id in ids:
        result_key = engine.keys.result(task_id)
        assert "4111" not in redis_cli(redis_server, "GET", result_key)
        shown = APIClient().get(f"/api/v1/tasks/{task_id}").json()
        assert shown["result"] == {"got": SECRET} and shown["encrypted"] is True  # (its payload: compacted)
    assert "encrypted" not in engine.tasks.get(plain)
    waiting = engine.tasks.enqueue("enc.secret", SECRET, queue="enc-later").id
    # A process without the key (the API of a web node that was not given it) shows the word.
    settings.DTQ = {**settings.DTQ, "ENCRYPTION_KEYS": [], "ENCRYPT_TYPES": []}
    shown = APIClient().get(f"/api/v1/tasks/{waiting}").json()
    assert shown["payload"] == "encrypted" and shown["encrypted"] is True
    shown = APIClient().get(f"/api/v1/tasks/{ids[0]}").json()
    assert shown["result"] == "encrypted" and shown["encrypted"] is True
    page = APIClient().get(f"/tasks/{ids[0]}/").content.decode()
    assert "4111" not in page and "encrypted" in page


def test_keys_rotate_the_first_encrypts_and_all_decrypt(
        settings: Any, live_engine: Engine, start_worker: Callable[..., WorkerProcess]) -> None:
    old = encrypted_engine(settings, [KEY_A]).tasks.enqueue("enc.secret", SECRET, queue="rot").id
    engine = encrypted_engine(settings, [KEY_B, KEY_A])
    new = engine.tasks.enqueue("enc.secret", SECRET, queue="rot").id
    token = engine.client.hget(engine.keys.task(new), "payload")
    assert isinstance(token, str)
    Fernet(KEY_B.encode()).decrypt(token.strip('"').removeprefix("dtq-encrypted:").encode())  # under the new key
    worker = start_worker("--name", "rot", "--queues", "rot", **worker_env(f"{KEY_B},{KEY_A}"))
    for task_id in (old, new):
        wait_for(lambda t=task_id: engine.tasks.get(t)["status"] == "SUCCEEDED", timeout=20, message=worker.output)
        assert engine.tasks.get(task_id)["result"] == {"got": SECRET}


def test_a_lost_key_dead_letters_with_a_readable_error(
        settings: Any, live_engine: Engine, start_worker: Callable[..., WorkerProcess]) -> None:
    engine = encrypted_engine(settings, [KEY_A])
    task_id = engine.tasks.enqueue("enc.secret", SECRET, queue="lost", max_attempts=3).id
    worker = start_worker("--name", "lost", "--queues", "lost", **worker_env(KEY_B))
    wait_for(lambda: engine.tasks.get(task_id)["status"] == "DEAD_LETTERED", timeout=20, message=worker.output)
    task = engine.tasks.get(task_id)
    assert task["attempt"] == 1  # permanent: no retry brings the key back
    assert task["last_error"].startswith("dtq.DecryptionFailed: no key in DTQ_ENCRYPTION_KEYS decrypts it")


def test_a_workflow_s_encrypted_results_reach_the_next_step_decrypted(
        settings: Any, live_engine: Engine, start_worker: Callable[..., WorkerProcess]) -> None:
    engine = encrypted_engine(settings, [KEY_A])
    wid = engine.workflows.submit({"chain": [{"type": "enc.secret", "payload": SECRET, "queue": "encwf"},
                                             {"group": [{"type": "enc.secret", "payload": i, "queue": "encwf"}
                                                        for i in range(2)],
                                              "then": {"type": "enc.parent", "queue": "encwf"}}]})
    worker = start_worker("--name", "encwf", "--queues", "encwf", **worker_env(KEY_A))
    wait_for(lambda: engine.workflows.get(wid)["status"] == "SUCCEEDED", timeout=30, message=worker.output)
    last = engine.workflows.get(wid)["steps"][-1]["task_id"]
    assert engine.tasks.get(last)["result"] == {"parent": [{"got": 0}, {"got": 1}]}
    assert "Ada" not in str(engine.client.hgetall(engine.keys.workflow_part(wid, "result")))


@pytest.mark.parametrize("values,message", [
    ({"encryption_keys": ("not-a-key",)}, "DTQ_ENCRYPTION_KEYS: key 1 is not a Fernet key"),
    ({"encryption_keys": (KEY_A, "short")}, "key 2 is not a Fernet key"),
    ({"encrypt_types": ("*",)}, "DTQ_ENCRYPT_TYPES is set but DTQ_ENCRYPTION_KEYS is empty"),
])
def test_bad_settings_are_one_line_errors(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        DtqConfig(**values)
    assert KEY_A not in repr(DtqConfig(encryption_keys=(KEY_A,)))  # a printed config shows no key


def test_a_worker_with_a_bad_key_does_not_start(start_worker: Callable[..., WorkerProcess]) -> None:
    worker = start_worker("--name", "bad", **{**FAST, "DTQ_ENCRYPTION_KEYS": "nope"})
    assert worker.wait(timeout=30) != 0
    assert "DTQ_ENCRYPTION_KEYS: key 1 is not a Fernet key" in worker.output()

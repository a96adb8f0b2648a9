"""Encrypted payloads and results (issue 25): Redis never holds the plaintext (read with the real
redis-cli), the handler gets it, the API shows it to a process with the key and "encrypted" to one
without, keys rotate (the first encrypts, all decrypt), a lost key dead-letters with a readable
error, a workflow's encrypted results reach the next step decrypted. Only a task of an encrypted type
is decrypted: a token read out of Redis and submitted as a plain type's payload (or fed to a plain
step) stays a token, and a plain task's string that merely starts like one is shown as it is."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from cryptography.fernet import Fernet
from rest_framework.test import APIClient

from dtq_core import encryption
from dtq_core.config import ConfigError, DtqConfig
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.periodic import PeriodicSpec

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


def stolen_token(engine: Engine) -> str:
    """An encrypted task's payload as someone who reads Redis (a dump, a backup) without the keys has it."""
    secret_id = engine.tasks.enqueue("enc.secret", SECRET, queue="elsewhere").id
    token = engine.client.hget(engine.keys.task(secret_id), "payload")
    assert isinstance(token, str) and "4111" not in token
    return str(json.loads(token))


def keyless(settings: Any) -> Engine:
    """The engine of a web node given no key (docs/security.md: it shows "encrypted")."""
    settings.DTQ = {**settings.DTQ, "ENCRYPTION_KEYS": [], "ENCRYPT_TYPES": []}
    from dtq_core.conf import get_engine
    return get_engine()


def test_a_worker_does_not_decrypt_a_token_submitted_as_a_plain_type_s_payload(
        settings: Any, live_engine: Engine, start_worker: Callable[..., WorkerProcess]) -> None:
    """Submit is open: resubmitted as the payload of a plain type (dtq.echo, whose result is stored
    in clear), a stolen token is not decrypted, nor run: the attempt fails, saying the type is not
    one this worker encrypts (as it would for a worker whose DTQ_ENCRYPT_TYPES lacks it)."""
    token = stolen_token(encrypted_engine(settings, [KEY_A]))
    engine = keyless(settings)
    api = APIClient()
    created = api.post("/api/v1/tasks", {"type": "dtq.echo", "queue": "oracle", "payload": token}, format="json")
    assert created.status_code == 201, created.content
    task_id = created.json()["id"]
    worker = start_worker("--name", "oracle", "--queues", "oracle", **worker_env(KEY_A))
    wait_for(lambda: engine.tasks.get(task_id)["status"] in ("SUCCEEDED", "DEAD_LETTERED", "FAILED"),
             timeout=30, message=worker.output)
    task = engine.tasks.get(task_id)
    assert task["status"] == "DEAD_LETTERED" and task["last_error"].startswith("dtq.DecryptionFailed: "), task
    assert "does not encrypt type 'dtq.echo'" in task["last_error"] and "4111" not in task["last_error"]
    assert engine.client.get(engine.keys.result(task_id)) is None  # the handler never ran
    shown = api.get(f"/api/v1/tasks/{task_id}").json()
    assert "4111" not in json.dumps(shown), f"the keyless API reveals the secret: {shown}"


def test_a_plain_workflow_step_gets_a_token_a_step_before_it_returned_as_it_is(
        settings: Any, live_engine: Engine, start_worker: Callable[..., WorkerProcess]) -> None:
    """A plain step echoes a stolen token (in a list: a token as the whole payload is refused, see
    above); the plain step after it (whose result is in clear) gets that token as its input, not the
    plaintext."""
    engine = encrypted_engine(settings, [KEY_A])
    token = stolen_token(engine)
    wid = engine.workflows.submit({"chain": [{"type": "dtq.echo", "payload": [token], "queue": "wforacle"},
                                             {"type": "plain.parent", "queue": "wforacle"}]})
    worker = start_worker("--name", "wforacle", "--queues", "wforacle", **worker_env(KEY_A))
    wait_for(lambda: engine.workflows.get(wid)["status"] in ("SUCCEEDED", "FAILED"), timeout=30,
             message=worker.output)
    last = engine.workflows.get(wid)["steps"][-1]["task_id"]
    assert json.loads(str(engine.client.get(engine.keys.result(last)))) == {"parent": [token]}


def test_a_plain_task_s_string_payload_that_starts_like_a_token_is_shown_as_it_is(
        settings: Any, live_engine: Engine, start_worker: Callable[..., WorkerProcess]) -> None:
    """No encryption configured: a plain dtq.echo whose payload is a string with the reserved prefix
    is shown as that string, not as "encrypted", and runs (no DecryptionFailed)."""
    api = APIClient()
    body = {"type": "dtq.echo", "queue": "plain", "payload": "dtq-encrypted:see the docs"}
    created = api.post("/api/v1/tasks", body, format="json")
    assert created.status_code == 201, created.content
    task_id = created.json()["id"]
    shown = api.get(f"/api/v1/tasks/{task_id}").json()
    assert shown["payload"] == "dtq-encrypted:see the docs" and "encrypted" not in shown, shown
    worker = start_worker("--name", "plain", "--queues", "plain", **worker_env(KEY_A))
    wait_for(lambda: live_engine.tasks.get(task_id)["status"] in ("SUCCEEDED", "DEAD_LETTERED"), timeout=20,
             message=worker.output)
    shown = api.get(f"/api/v1/tasks/{task_id}").json()
    assert shown["status"] == "SUCCEEDED" and shown["result"] == "dtq-encrypted:see the docs", shown
    assert "encrypted" not in shown, shown


@pytest.fixture
def revealing() -> Iterator[None]:
    """Put back the keys and types this process reveals with (encryption.configure is process-wide)."""
    kept = encryption._current, encryption._types
    yield
    encryption.configure(*kept)


def test_a_process_that_knows_the_encrypted_types_shows_a_plain_type_s_token_as_it_is(revealing: None) -> None:
    token = json.loads(encryption.seal((KEY_A,), json.dumps(SECRET)))
    encryption.configure((KEY_A,), ("enc.secret",))
    assert encryption.reveal(token, "enc.secret") == (SECRET, True)
    assert encryption.reveal(token, "dtq.echo") == (token, False)
    assert encryption.reveal(token) == (SECRET, True)  # type unknown: the token's shape decides
    encryption.configure(())  # given no key, nor the types (a web node): by its shape
    assert encryption.reveal(token, "dtq.echo") == ("encrypted", True)
    for text in ("dtq-encrypted:see the docs", "dtq-encrypted:", "dtq-encrypted:gAAAAA==", "dtq-encrypted:é"):
        assert encryption.reveal(text, "dtq.echo") == (text, False)


def in_clear(engine: Engine, text: str) -> list[str]:
    """The keys under the test's prefix where someone who reads Redis (a dump, a replica) sees text."""
    found = []
    for key in engine.client.scan_iter(match=f"{engine.keys.prefix}:*", count=1000):
        kind = engine.client.type(key)
        dump = {"hash": engine.client.hgetall, "string": engine.client.get,
                "stream": engine.client.xrange, "zset": lambda k: engine.client.zrange(k, 0, -1),
                "list": lambda k: engine.client.lrange(k, 0, -1), "set": engine.client.smembers}[kind](key)
        if text in str(dump):
            found.append(key)
    return found


def test_a_periodic_schedule_of_an_encrypted_type_keeps_its_payload_sealed(
        settings: Any, live_engine: Engine, anonymous_admin: Any,
        start_worker: Callable[..., WorkerProcess]) -> None:
    """Its spec and the task fields its ticks copy hold the same token: a keyless web node shows
    "encrypted", the tasks it fires decrypt on the worker, and a keyless change keeps it sealed."""
    engine = encrypted_engine(settings, [KEY_A])
    api = APIClient()
    created = api.post("/api/v1/periodic", {"name": "nightly.charge", "type": "enc.secret", "payload": SECRET,
                                            "every_seconds": 3600, "queue": "encper"}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["payload"] == SECRET and created.json()["encrypted"] is True
    assert in_clear(engine, "4111") == []
    engine = keyless(settings)
    shown = api.get("/api/v1/periodic/nightly.charge").json()
    assert shown["payload"] == "encrypted" and shown["encrypted"] is True, shown
    assert api.get("/api/v1/periodic").json()["results"][0]["payload"] == "encrypted"
    # A change from the keyless node keeps the token; a new payload it could only store in clear.
    changed = api.patch("/api/v1/periodic/nightly.charge", {"every_seconds": 1800}, format="json")
    assert changed.status_code == 200 and changed.json()["payload"] == "encrypted", changed.content
    refused = api.patch("/api/v1/periodic/nightly.charge", {"payload": {"card": "5500"}}, format="json")
    assert refused.status_code == 400 and refused.json()["error"]["field"] == "payload", refused.content
    fired = engine.periodic.trigger("nightly.charge", actor=Actor.user("ops", source="api"))["task_id"]
    worker = start_worker("--name", "encper", "--queues", "encper", **worker_env(KEY_A))
    wait_for(lambda: engine.tasks.get(fired)["status"] == "SUCCEEDED", timeout=20, message=worker.output)
    assert in_clear(engine, "4111") == []
    engine = encrypted_engine(settings, [KEY_A])
    assert engine.tasks.get(fired)["result"] == {"got": SECRET}  # sealed once: the handler got the plaintext
    changed = api.patch("/api/v1/periodic/nightly.charge", {"payload": {"card": "5500-0000"}}, format="json")
    assert changed.status_code == 200 and changed.json()["payload"] == {"card": "5500-0000"}, changed.content
    assert in_clear(engine, "5500") == []


def test_a_declared_schedule_of_an_encrypted_type_is_sealed_and_sealed_again_after_a_rotation(
        settings: Any, live_engine: Engine) -> None:
    spec = PeriodicSpec(name="declared.charge", type="enc.secret", payload=SECRET, every_seconds=60, queue="encdecl")
    engine = encrypted_engine(settings, [KEY_A])
    assert engine.periodic.sync_declared([spec])["added"] == ["declared.charge"]
    assert in_clear(engine, "4111") == []
    assert engine.periodic.get("declared.charge")["payload"] == SECRET
    assert engine.periodic.sync_declared([spec])["unchanged"] == ["declared.charge"]  # a restart rewrites nothing
    engine = encrypted_engine(settings, [KEY_B, KEY_A])
    assert engine.periodic.sync_declared([spec])["changed"] == ["declared.charge"]  # under the new key now
    assert engine.periodic.sync_declared([spec])["unchanged"] == ["declared.charge"]
    engine = encrypted_engine(settings, [KEY_B])  # the old key dropped: what the ticks copy still decrypts
    assert engine.periodic.get("declared.charge")["payload"] == SECRET
    fired = engine.periodic.trigger("declared.charge", actor=Actor.user("ops", source="api"))["task_id"]
    assert engine.tasks.get(fired)["payload"] == SECRET and in_clear(engine, "4111") == []

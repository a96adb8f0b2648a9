"""dtq_core.redis_errors, the one translator for Redis trouble: real redis-py exceptions from real
redis-servers in (a closed port, a frozen server, one loading its dataset, a database it does not
have, a failed RDB save that makes it refuse writes, maxmemory), the code, status and words users
read out. And every surface (API submit, batch submit, /ready, the console's JSON and pages, the
CLI) says the same for the same trouble."""

from __future__ import annotations

import html
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
import redis
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from dtq_core.config import DtqConfig
from dtq_core.connection import sync_client
from dtq_core.errors import RedisUnavailable, RedisWriteRefused
from dtq_core.redis_errors import one_line, redis_trouble, translate

from ..conftest import wait_for
from ..failure.test_redis_loading import LOAD_SLOWLY, loading, persist_a_dataset
from ..redis_server import RedisServer, free_port

WRONG_DATABASE = "DTQ_REDIS_URL names a database this Redis does not have (DB index is out of range)"


@dataclass
class Trouble:
    url: str  # a Redis URL that has this trouble
    caught: Callable[[], BaseException]  # what redis-py raises for a write there
    refuses_reads: bool = True
    # Brings the trouble on, for those a test can first write to (to have a queue to pause).
    start: Callable[[], None] | None = None


def _caught(call: Callable[[], Any]) -> BaseException:
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the exception is the result
        return exc
    raise AssertionError(f"{call} raised nothing")


def _writer(url: str, **kwargs: Any) -> Callable[[], BaseException]:
    def write() -> BaseException:
        client = sync_client(DtqConfig(redis_url=url, key_prefix="dtqtest:errors"))
        try:
            return _caught(lambda: client.set("dtqtest:errors:k", "v", **kwargs))
        finally:
            client.close()
    return write


def _closed_port(stack: ExitStack, tmp_path: Path) -> Trouble:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    return Trouble(url, _writer(url))


def _frozen(stack: ExitStack, tmp_path: Path) -> Trouble:
    server = stack.enter_context(RedisServer(tmp_path / "frozen", appendonly=False))
    server.pause()  # SIGSTOP: it accepts connections (the kernel does) but never answers
    stack.callback(server.resume)
    return Trouble(server.url, _writer(server.url))


def _loading(stack: ExitStack, tmp_path: Path) -> Trouble:
    # 10,000 keys at 10 ms each: over a minute and a half of LOADING, answered every ~0.3 s.
    persist_a_dataset(tmp_path / "loading", keys=10_000)
    server = RedisServer(tmp_path / "loading", appendonly=True, args=[*LOAD_SLOWLY[:1], "10000", *LOAD_SLOWLY[2:]])
    stack.callback(server.stop)
    server.start(wait=False)
    wait_for(lambda: loading(server.port), timeout=15, message="redis-server never answered LOADING")
    return Trouble(server.url, _writer(server.url))


def _wrong_database(stack: ExitStack, tmp_path: Path) -> Trouble:
    server = stack.enter_context(RedisServer(tmp_path / "wrongdb", appendonly=False))
    url = server.url.rsplit("/", 1)[0] + "/99"  # Redis has 16 databases
    return Trouble(url, _writer(url))


def _disk_refused(stack: ExitStack, tmp_path: Path) -> Trouble:
    """Its RDB save fails (the file's name is taken by a directory), so with a save point set
    (stop-writes-on-bgsave-error, the default) Redis answers every write MISCONF."""
    directory = tmp_path / "misconf"
    server = stack.enter_context(RedisServer(directory, appendonly=False, args=["--save", "3600 1"]))
    client = redis.Redis(port=server.port, decode_responses=True)
    stack.callback(client.close)
    stack.callback(client.config_set, "save", "")  # or it refuses SIGTERM, unable to save on the way out

    def start() -> None:
        (directory / "dump.rdb").mkdir()
        client.bgsave()
        wait_for(lambda: client.info("persistence")["rdb_last_bgsave_status"] == "err", timeout=15)

    return Trouble(server.url, _writer(server.url), refuses_reads=False, start=start)


def _full_memory(stack: ExitStack, tmp_path: Path) -> Trouble:
    server = stack.enter_context(RedisServer(tmp_path / "oom", appendonly=False,
                                             args=["--maxmemory-policy", "noeviction"]))
    client = redis.Redis(port=server.port)
    stack.callback(client.close)
    return Trouble(server.url, _writer(server.url), refuses_reads=False,
                   start=lambda: client.config_set("maxmemory", 1))


TROUBLES = {"closed port": _closed_port, "frozen": _frozen, "loading": _loading, "wrong database": _wrong_database,
            "disk refused": _disk_refused, "full memory": _full_memory}


@pytest.fixture
def trouble(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Trouble]:
    """The trouble, not yet started when it has a start (see Trouble.start)."""
    with ExitStack() as stack:
        yield TROUBLES[request.param](stack, tmp_path)


UNAVAILABLE = ("REDIS_UNAVAILABLE", "Redis is unavailable; try again shortly", "Redis is unavailable")
REFUSED_DISK = "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk."
REFUSED_MEMORY = "OOM command not allowed when used memory > 'maxmemory'."


@pytest.mark.parametrize(("trouble", "raised", "code", "message", "state", "line"), [
    ("closed port", redis.exceptions.ConnectionError, *UNAVAILABLE, "cannot reach Redis at {url}: Error 111 "),
    ("frozen", redis.exceptions.TimeoutError, *UNAVAILABLE, "cannot reach Redis at {url}: Timeout"),
    pytest.param("loading", redis.exceptions.BusyLoadingError, "REDIS_UNAVAILABLE",
                 "Redis is unavailable; try again shortly", "Redis is loading its dataset into memory",
                 "cannot reach Redis at {url}: Redis is loading the dataset", marks=pytest.mark.slow),
    ("wrong database", redis.exceptions.ResponseError, "REDIS_UNAVAILABLE", WRONG_DATABASE, WRONG_DATABASE,
     WRONG_DATABASE + ": {url}"),
    ("disk refused", redis.exceptions.ResponseError, "REDIS_WRITE_FAILED",
     f"Redis refused the write; try again shortly ({REFUSED_DISK}", f"Redis refuses writes ({REFUSED_DISK}",
     f"Redis refuses writes ({REFUSED_DISK}"),
    ("full memory", redis.exceptions.OutOfMemoryError, "REDIS_WRITE_FAILED",
     f"Redis refused the write; try again shortly ({REFUSED_MEMORY})", f"Redis refuses writes ({REFUSED_MEMORY})",
     f"Redis refuses writes ({REFUSED_MEMORY}): {{url}}"),
], indirect=["trouble"])
def test_the_translator_maps_real_redis_failures(trouble: Trouble, raised: type[BaseException], code: str,
                                                 message: str, state: str, line: str) -> None:
    if trouble.start is not None:
        trouble.start()
    exc = trouble.caught()
    assert type(exc) is raised, repr(exc)
    translated = translate(exc)
    assert translated is not None, repr(exc)
    assert (translated.code, translated.http_status) == (code, 503)
    # Exact where the words are ours; Redis's own reply goes on past what is pinned here.
    assert translated.message.startswith(message) and translated.message.endswith(")" if "(" in message else message)
    assert translated.state.startswith(state), translated.state
    assert one_line(translated, trouble.url).startswith(line.format(url=trouble.url))
    expected = RedisUnavailable if code == "REDIS_UNAVAILABLE" else RedisWriteRefused
    with pytest.raises(expected) as raised_as, redis_trouble():
        raise exc
    assert raised_as.value.message == translated.message and raised_as.value.__cause__ is exc


def test_a_refusal_reads_the_same_from_a_command_a_script_and_a_pipeline(tmp_path: Path) -> None:
    # Redis's reply reaches users, not where it came from: a script's location or a pipeline's
    # "Command # 1 (...) of pipeline" (which would quote the command's arguments, a payload).
    with ExitStack() as stack:
        trouble = _disk_refused(stack, tmp_path)
        assert trouble.start is not None
        trouble.start()
        client = redis.Redis.from_url(trouble.url, decode_responses=True)
        stack.callback(client.close)
        direct = _caught(lambda: client.set("dtqtest:errors:k", "v"))
        script = _caught(lambda: client.eval("return redis.call('SET', KEYS[1], 'v')", 1, "dtqtest:errors:k"))
        pipe = client.pipeline(transaction=False).set("dtqtest:errors:k", "secret payload")
        piped = _caught(pipe.execute)
        messages = {kind: translate(exc) for kind, exc in (("direct", direct), ("script", script), ("pipe", piped))}
        assert all(m is not None and m.code == "REDIS_WRITE_FAILED" for m in messages.values()), messages
        assert messages["direct"].message == messages["script"].message == messages["pipe"].message, messages
        assert "secret payload" not in messages["pipe"].message


@pytest.mark.parametrize("exc", [
    redis.exceptions.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
    redis.exceptions.NoScriptError("NOSCRIPT No matching script."),
    ValueError("not Redis at all"),
])
def test_what_is_not_redis_trouble_passes_through(exc: BaseException) -> None:
    assert translate(exc) is None
    with pytest.raises(type(exc)) as raised, redis_trouble():
        raise exc
    assert raised.value is exc


def _cli(*args: str) -> str:
    with pytest.raises(CommandError) as failed:
        call_command(*args, stdout=StringIO(), stderr=StringIO())
    return str(failed.value)


@pytest.mark.parametrize("trouble", ["closed port", pytest.param("loading", marks=pytest.mark.slow), "wrong database",
                                     "disk refused", "full memory"], indirect=True)
def test_every_surface_says_the_same_for_the_same_trouble(trouble: Trouble, settings: Any, db: Any) -> None:
    settings.DTQ = {**settings.DTQ, "REDIS_URL": trouble.url, "KEY_PREFIX": f"dtqtest:{uuid4().hex[:12]}"}
    console = Client()
    console.force_login(User.objects.create_superuser("errors-admin", password="x"))
    api = Client()
    if trouble.start is not None:  # a queue to pause, so that the pause reaches Redis's refusal
        assert api.post("/api/v1/tasks", {"type": "dtq.echo"}, content_type="application/json").status_code == 201
        trouble.start()
    want = translate(trouble.caught())
    assert want is not None

    # Requests that write: one code, one message, wherever they come from.
    submit = api.post("/api/v1/tasks", {"type": "dtq.echo"}, content_type="application/json")
    batch = api.post("/api/v1/tasks/batch", {"tasks": [{"type": "dtq.echo"}, {"type": "dtq.echo"}]},
                     content_type="application/json")
    for response in (submit, batch):
        assert response.status_code == 503, response.content
        error = response.json()["error"]
        assert (error["code"], error["message"]) == (want.code, want.message), error
        assert error["request_id"] == response["X-Request-ID"]
    assert _cli("queue", "pause", "default") == one_line(want, trouble.url)
    page = console.post("/queues/default/pause")
    assert page.status_code == 503 and want.state in html.unescape(page.content.decode()), page.content[:500]

    # Probes and reads say it as a condition, where Redis refuses them: /ready (a write: a Redis
    # that refuses writes is not ready for submits), the console's JSON (a Redis refusing writes
    # still serves reads).
    ready = api.get("/ready")
    assert ready.status_code == 503, ready.content
    assert (ready.json()["error"]["code"], ready.json()["error"]["message"]) == (want.code, want.state)
    state = console.get("/console/state.json")
    assert state.status_code == (503 if trouble.refuses_reads else 200), state.content
    if trouble.refuses_reads:
        assert (state.json()["error"]["code"], state.json()["error"]["message"]) == (want.code, want.state)
        assert _cli("queue", "list") == one_line(want, trouble.url)

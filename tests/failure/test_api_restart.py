"""The API server SIGKILLed in the middle of a bulk DLQ retry, started from the API or from the
console (failure-modes.md: "API (or console, or CLI) process killed in the middle of a bulk
action"): the audit trail shows who started what on which selection and that it never finished;
every dead letter is either requeued or still in the DLQ, never both and never lost; running the
action again finishes the rest."""

from __future__ import annotations

import http.cookiejar
import json
import re
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from tests.api.support import make_dead_letters
from tests.browser.server import PASSWORD, ConsoleServer
from tests.conftest import wait_for
from tests.redis_server import RedisServer

from .support import depth

pytestmark = pytest.mark.slow

API_KEY = "restart-test-key-0123456789abcdef"
DEAD = 8000  # two pipelined round trips of retries (BATCH * PIPELINE_DEPTH = 4000 each)


@pytest.fixture
def api_server(redis_server: RedisServer, key_prefix: str, tmp_path: Path) -> Iterator[ConsoleServer]:
    server = ConsoleServer(tmp_path, redis_server.url, key_prefix, DTQ_API_KEY=API_KEY)
    yield server
    server.stop()


@pytest.fixture
def dtq(redis_server: RedisServer, key_prefix: str) -> Engine:
    return Engine(DtqConfig(redis_url=redis_server.url, key_prefix=key_prefix))


def call(server: ConsoleServer, method: str, path: str, body: Any = None, timeout: float = 120) -> Any:
    request = urllib.request.Request(
        server.url + path, method=method, data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "X-API-Key": API_KEY, "X-Request-ID": "bulk-retry-1"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def in_background(send: Callable[[], object]) -> None:
    """Send the request and leave: the server gets killed before it could answer."""
    def run() -> None:
        try:
            send()
        except OSError:
            pass  # the connection dies with the server

    threading.Thread(target=run, daemon=True).start()


def api_retry(server: ConsoleServer) -> tuple[str, str]:
    in_background(lambda: call(server, "POST", "/api/v1/dlq/retry", {"queue": "default"}, timeout=60))
    return Actor.api_key(API_KEY).name, "api"


def console_retry(server: ConsoleServer) -> tuple[str, str]:
    """Log in as the staff user and press "Retry all matching" (confirmed) for queue default."""
    cookies = http.cookiejar.CookieJar()
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(cookies))

    def post(path: str, fields: dict[str, str]) -> Any:
        token = next(c.value for c in cookies if c.name == "csrftoken")
        data = urllib.parse.urlencode({**fields, "csrfmiddlewaretoken": token}).encode()
        return browser.open(urllib.request.Request(server.url + path, data=data, method="POST",
                                                   headers={"X-Request-ID": "bulk-retry-1"}), timeout=60)

    login = browser.open(server.url + "/login/", timeout=30).read().decode()
    assert re.search(r'name="csrfmiddlewaretoken"', login)
    post("/login/", {"username": "admin", "password": PASSWORD})
    assert "Log out" in browser.open(server.url + "/dlq/", timeout=30).read().decode()  # logged in
    in_background(lambda: post("/dlq/matching/retry", {"queue": "default", "confirm": "yes"}))
    return "user:admin", "console"


@pytest.mark.parametrize("start", [api_retry, console_retry], ids=["api", "console"])
def test_a_bulk_retry_cut_short_by_a_server_crash_is_audited_unfinished_and_loses_nothing(
        api_server: ConsoleServer, dtq: Engine, db: Any, start: Callable[[ConsoleServer], tuple[str, str]]) -> None:
    task_ids = make_dead_letters(dtq, DEAD)
    assert dtq.dlq.count() == DEAD
    if start is console_retry:
        api_server.prepare()  # a user database with the staff user "admin"
    clients_before = dtq.client.info("clients")["connected_clients"]
    api_server.start()

    actor, source = start(api_server)
    # Kill it as soon as the first entries have left the DLQ: the retry is mid-way.
    wait_for(lambda: dtq.dlq.count() < DEAD, timeout=60, interval=0.001,
             message=lambda: f"the bulk retry never started: {api_server.log()[-2000:]}")
    api_server.crash()  # SIGKILL
    # Once Redis has dropped the dead server's connections, it has run every command they sent.
    wait_for(lambda: dtq.client.info("clients")["connected_clients"] <= clients_before, timeout=30,
             message="Redis still holds the killed server's connections")
    left = dtq.dlq.count()
    assert 0 < left < DEAD, f"the kill did not land mid-way ({left} of {DEAD} left)"

    # Every dead letter is either requeued (QUEUED, one stream entry) or still dead, never both.
    pipe = dtq.client.pipeline(transaction=False)
    for task_id in task_ids:
        pipe.hmget(dtq.keys.task(task_id), "status", "dlq_entry_id")
    records = pipe.execute()
    queued = [s for s, _ in records if s == "QUEUED"]
    dead = [e for s, e in records if s == "DEAD_LETTERED"]
    assert len(queued) + len(dead) == DEAD and len(dead) == left and all(dead)
    assert depth(dtq.client, dtq.keys, "default") == len(queued)

    # The restarted API, the console and the CLI all say it started and did not finish.
    api_server.start()
    rows = call(api_server, "GET", "/api/v1/audit?action=dlq.retry")["results"]
    assert len(rows) == 1
    row = rows[0]
    assert (row["outcome"], row["actor"], row["source"], row["request_id"]) == (
        "unfinished", actor, source, "bulk-retry-1")
    assert row["selection"] == {"queue": "default"} and row["selected"] == DEAD and row["op_id"]
    assert row["target"] == "dlq:queue=default"
    cli = StringIO()
    call_command("audit", "list", "--action", "dlq.retry", stdout=cli, stderr=StringIO())
    header, line = cli.getvalue().splitlines()
    assert "OUTCOME" in header and actor in line and f"UNFINISHED ({row['count']} of {DEAD})" in line
    console = Client()
    console.force_login(User.objects.create_superuser("ops", "ops@example.com", "x"))
    page = console.get("/audit/").content.decode()
    assert "1 action started and never recorded as finished" in page
    assert page.count('class="outcome-unfinished"') == 1 and actor in page

    # Running it again finishes the rest, and that run is recorded as finished.
    assert call(api_server, "POST", "/api/v1/dlq/retry", {"queue": "default"})["count"] == left
    assert dtq.dlq.count() == 0
    statuses = dtq.client.pipeline(transaction=False)
    for task_id in task_ids:
        statuses.hget(dtq.keys.task(task_id), "status")
    assert set(statuses.execute()) == {"QUEUED"}
    assert depth(dtq.client, dtq.keys, "default") == DEAD  # no task queued twice
    rows = call(api_server, "GET", "/api/v1/audit?action=dlq.retry")["results"]
    assert [(r["outcome"], r["count"]) for r in rows] == [("finished", left), ("unfinished", row["count"])]

"""With DTQ_CONSOLE_LOGIN_REQUIRED=true: pages send anonymous readers to the login page, and the
live feed's WebSocket is authenticated by the session cookie through daphne's AuthMiddlewareStack."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dtq_core.engine import Engine
from tests.redis_server import RedisServer

from .conftest import log_in
from .server import ConsoleServer


@pytest.fixture(scope="module")
def private_console(redis_server: RedisServer, console_prefix: str, console_db: Path,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    server = ConsoleServer(tmp_path_factory.mktemp("private"), redis_server.url, console_prefix,
                           DTQ_CONSOLE_LOGIN_REQUIRED="true")
    server.prepare(console_db)
    server.start()
    yield server
    server.stop()


def test_anonymous_readers_are_sent_to_login_and_the_socket_is_refused(page: Any, private_console: ConsoleServer
                                                                      ) -> None:
    page.goto(private_console.url + "/dlq/")
    assert page.url.startswith(private_console.url + "/login/?next=/dlq/")
    closed = page.evaluate("""(url) => new Promise(resolve => {
        const ws = new WebSocket(url);
        ws.onclose = e => resolve(e.code);
        ws.onopen = () => resolve('open');
    })""", private_console.url.replace("http", "ws") + "/ws/events")
    assert closed != "open"


def test_a_logged_in_reader_gets_pages_and_the_live_feed(page: Any, private_console: ConsoleServer,
                                                         console_engine: Engine) -> None:
    log_in(page, private_console, "viewer")
    page.wait_for_selector("#feed-state[data-state=live]")
    task_id = console_engine.tasks.enqueue("t.private", queue="private").id
    page.wait_for_selector(f'#feed tr[data-event-task="{task_id}"]')
    page.goto(private_console.url + "/audit/")
    assert page.locator("h1").inner_text() == "Audit log"

"""The console mounted under a prefix of the project's choosing (/ops/), in a project with Django's
defaults for LOGIN_URL and LOGIN_REDIRECT_URL and no template of dtq's checkout (docs/install.md)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.http import HttpResponse
from django.test import Client
from django.urls import include, path

from dtq_core.engine import Engine

from .conftest import PASSWORD

URL_ATTRIBUTE = re.compile(r'\b(?:href|action|src|formaction|data-[a-z-]+-(?:url|path))="([^"]*)"')


@pytest.fixture
def mounted(settings: Any) -> Any:
    settings.ROOT_URLCONF = "tests.user_project.urls"
    settings.TEMPLATES = [{**settings.TEMPLATES[0], "DIRS": []}]  # only what the installed apps ship
    # Django's defaults, as a new project has them: not the console's pages.
    settings.LOGIN_URL, settings.LOGIN_REDIRECT_URL, settings.LOGOUT_REDIRECT_URL = (
        "/accounts/login/", "/accounts/profile/", None)
    return settings


def urls_on(html: str) -> list[str]:
    return URL_ATTRIBUTE.findall(html)


def test_every_link_form_and_script_url_of_the_console_stays_under_its_prefix(
        mounted: Any, live_engine: Engine, login: Callable[[str], Client]) -> None:
    task_id = live_engine.tasks.enqueue("t.x", queue="work").id
    client = login("admin")
    for page in ("/ops/", "/ops/tasks/", f"/ops/tasks/{task_id}/", "/ops/queues/work/", "/ops/dlq/", "/ops/schedule/",
                 "/ops/workers/", "/ops/audit/"):
        response = client.get(page)
        assert response.status_code == 200, page
        html = response.content.decode()
        strays = [u for u in urls_on(html) if u and not u.startswith(("/ops/", "/ops-api/", "/static/", "#", "?"))]
        assert strays == [], (page, strays)
    overview = client.get("/ops/").content.decode()
    # It should give live.js every URL it builds: the feed's WebSocket, task and queue links.
    assert 'data-events-path="/ops/ws/events"' in overview
    assert 'data-task-url="/ops/tasks/"' in overview and 'data-queue-url="/ops/queues/"' in overview
    assert 'href="/ops-api/api/v1/tasks"' in overview
    assert f'href="/ops/tasks/{task_id}/"' in client.get("/ops/queues/work/").content.decode()


def test_the_periodic_pages_stay_under_the_prefix(mounted: Any, live_engine: Engine,
                                                   login: Callable[[str], Client]) -> None:
    from dtq_core.engine.audit import Actor
    from dtq_core.engine.periodic import PeriodicSpec

    live_engine.periodic.create(PeriodicSpec(name="r.nightly", type="dtq.echo", cron="0 3 * * *"), actor=Actor.cli())
    task_id = live_engine.periodic.trigger("r.nightly", actor=Actor.cli())["task_id"]
    client = login("admin")
    for page in ("/ops/periodic/", "/ops/periodic/r.nightly/", "/ops/periodic/r.nightly/delete/confirm",
                 f"/ops/tasks/{task_id}/"):
        response = client.get(page)
        assert response.status_code == 200, page
        strays = [u for u in urls_on(response.content.decode())
                  if u and not u.startswith(("/ops/", "/ops-api/", "/static/", "#", "?"))]
        assert strays == [], (page, strays)
    assert 'href="/ops/periodic/r.nightly/"' in client.get(f"/ops/tasks/{task_id}/").content.decode()
    assert client.post("/ops/periodic/r.nightly/pause")["Location"] == "/ops/periodic/r.nightly/"


def test_log_in_and_out_stay_in_the_console_with_django_s_default_login_settings(
        mounted: Any, users: dict[str, Any]) -> None:
    client = Client()
    page = client.get("/ops/login/")
    assert page.status_code == 200
    assert 'action="/ops/login/"' in page.content.decode()
    logged_in = client.post("/ops/login/", {"username": "admin", "password": PASSWORD})
    assert (logged_in.status_code, logged_in["Location"]) == (302, "/ops/")
    back = client.post("/ops/login/?next=/ops/dlq/", {"username": "admin", "password": PASSWORD, "next": "/ops/dlq/"})
    assert back["Location"] == "/ops/dlq/"
    logged_out = client.post("/ops/logout/")
    assert (logged_out.status_code, logged_out["Location"]) == (302, "/ops/")


def test_a_page_or_action_that_needs_a_login_sends_to_the_console_s_login_page(
        mounted: Any, live_engine: Engine, users: dict[str, Any]) -> None:
    mounted.DTQ_CONSOLE_LOGIN_REQUIRED = True
    client = Client()
    page = client.get("/ops/dlq/")
    assert (page.status_code, page["Location"]) == (302, "/ops/login/?next=/ops/dlq/")
    action = client.post("/ops/queues/work/pause")
    assert (action.status_code, action["Location"]) == (302, "/ops/login/?next=/ops/queues/work/")


def test_the_live_feed_is_served_beside_the_console_s_pages(mounted: Any, live_engine: Engine) -> None:
    from dtq_dashboard.asgi import websocket_application

    application = websocket_application(None)  # HTTP is not used here

    async def connects(path: str) -> bool:
        socket = WebsocketCommunicator(application, path)
        connected, _ = await socket.connect()
        if connected:
            await socket.disconnect()
        return connected

    assert asyncio.run(connects("/ops/ws/events")) is True
    assert asyncio.run(connects("/ws/events")) is False  # the root is the project's, not the console's


def test_the_feed_without_the_console_s_urls_is_refused_at_start_with_what_to_add(settings: Any) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from dtq_dashboard.asgi import websocket_application

    settings.ROOT_URLCONF = "dtq_api.urls"
    with pytest.raises(ImproperlyConfigured, match=r'include\("dtq_dashboard.urls"\)'):
        websocket_application(None)


def test_the_footer_links_no_view_of_the_project_s_own_that_shares_the_api_s_url_name(
        settings: Any, live_engine: Engine) -> None:
    settings.ROOT_URLCONF = "tests.dashboard.test_under_prefix"
    html = Client().get("/ops/").content.decode()
    assert "/shop/tasks" not in html and ">API</a>" not in html


def _shop_tasks(request: Any) -> HttpResponse:
    return HttpResponse("the project's own task list")


# The URLconf of the test above: a project with its own "task-list" and the console, no dtq API.
urlpatterns = [
    path("shop/tasks", _shop_tasks, name="task-list"),
    path("ops/", include("dtq_dashboard.urls")),
]

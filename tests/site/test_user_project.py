"""dtq in a project of a user's own (tests/user_project: no settings.DTQ, the documented apps)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import redis

from dtq_core.keys import Keys

from ..browser.server import PASSWORD
from ..conftest import ROOT, wait_for
from ..redis_server import free_port

SETTINGS = "tests.user_project.settings"


def run(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("DTQ_", "DJANGO_"))}
    environ.update(env, DJANGO_SETTINGS_MODULE=SETTINGS)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60)


def test_the_dtq_environment_applies_without_settings_dtq() -> None:
    # It should read DTQ_* the way dtq_site does, not fall back to the defaults (Redis on 6379).
    proc = run(["-c", "import django; django.setup(); from dtq_core.conf import get_config; c = get_config(); "
                      "print(c.redis_url, c.task_modules, c.max_attempts)"],
               DTQ_REDIS_URL="redis://127.0.0.1:7191/0", DTQ_TASK_MODULES="a.tasks, b", DTQ_MAX_ATTEMPTS="7")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[0] == "redis://127.0.0.1:7191/0 ('a.tasks', 'b') 7"


def test_an_invalid_variable_stops_a_command_with_one_line() -> None:
    proc = run(["-m", "django", "check"], DTQ_MAX_ATTEMPTS="abc")
    assert proc.returncode == 2
    assert [line for line in proc.stderr.splitlines() if line.strip()] == [
        "dtq: invalid configuration: DTQ_MAX_ATTEMPTS must be an integer (got 'abc')"]


def test_it_enqueues_and_a_burst_worker_runs_the_task(redis_server: Any, key_prefix: str) -> None:
    env = {"DTQ_REDIS_URL": redis_server.url, "DTQ_KEY_PREFIX": key_prefix,
           "DTQ_TASK_MODULES": "tests.user_project.tasks"}
    enqueue = run(["-c", "import django; django.setup(); from dtq_core.conf import get_config; "
                         f"assert get_config().redis_url == {redis_server.url!r}, get_config().redis_url; "
                         "import dtq_tasks; print(dtq_tasks.enqueue('userproject.add', {'a': 2, 'b': 3}))"], **env)
    assert enqueue.returncode == 0, enqueue.stderr
    task_id = enqueue.stdout.strip()
    worker = run(["-m", "django", "runworker_dtq", "--burst", "--name", "w1"], **env)
    assert worker.returncode == 0, worker.stdout + worker.stderr
    # No LOGGING in the project: the worker still says what it serves, and where.
    assert (f"INFO dtq.worker worker_id=w1 serving queues=* concurrency=10 redis={redis_server.url} task_types=8 "
            "(django.atask, django.task, dtq.echo, dtq.fail, dtq.flaky, dtq.sleep, dtq.sleep_sync, userproject.add)"
            ) in worker.stderr
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    assert client.hget(Keys(key_prefix).task(task_id), "status") == "SUCCEEDED"
    assert client.get(Keys(key_prefix).result(task_id)) == "5"


def test_the_worker_s_start_up_line_masks_the_redis_password(redis_server: Any, key_prefix: str) -> None:
    url = redis_server.url.replace("redis://", "redis://ops:s3cret-pw@")
    worker = run(["-m", "django", "runworker_dtq", "--burst", "--name", "w2", "--queues", "mail,sms",
                  "--concurrency", "3"], DTQ_REDIS_URL=url, DTQ_KEY_PREFIX=key_prefix)
    masked = url.replace("s3cret-pw", "***")
    assert f"worker_id=w2 serving queues=mail,sms concurrency=3 redis={masked} task_types=" in worker.stderr
    assert "s3cret-pw" not in worker.stdout + worker.stderr  # this Redis has no password: the worker stops

# -- the built wheel in a fresh virtualenv, in a `django-admin startproject` project ----------------
# What a new user does, as docs/install.md says: nothing copied from dtq's checkout, no settings
# beyond the apps, WhiteNoise and STATIC_ROOT, the console and the API under prefixes of their own.

SETTINGS_ADDITION = """
# dtq (docs/install.md)
INSTALLED_APPS += ["rest_framework", "drf_spectacular", "channels",
                   "dtq_core", "dtq_worker", "dtq_api", "dtq_dashboard"]
MIDDLEWARE.insert(MIDDLEWARE.index("django.middleware.security.SecurityMiddleware") + 1,
                  "whitenoise.middleware.WhiteNoiseMiddleware")
STATIC_ROOT = BASE_DIR / "staticfiles"
"""
URLS_ADDITION = """
from django.urls import include  # noqa: E402

urlpatterns += [
    path("ops/", include("dtq_dashboard.urls")),
    path("ops-api/", include("dtq_api.urls")),
]
"""
TASKS_MODULE = '''
from pathlib import Path

import dtq_tasks


@dtq_tasks.task("shop.charge")
def charge(payload):
    if Path(payload["decline_while"]).exists():
        raise RuntimeError("card declined")
    return {"charged": payload["amount"]}
'''
ASGI_LINE = "application = get_asgi_application()"


class UserProject:
    """dtq's wheel in a virtualenv of its own, and a startproject site using it (never this checkout)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.venv = root / "venv"
        self.site = root / "site"
        self.procs: list[subprocess.Popen[bytes]] = []

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def env(self, **extra: str) -> dict[str, str]:
        environ = {k: v for k, v in os.environ.items()
                   if not k.startswith(("DTQ_", "DJANGO_", "PYTHON", "VIRTUAL_ENV"))}
        environ.update(extra, PYTHONUNBUFFERED="1")
        return environ

    def run(self, args: list[str], timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, cwd=self.site, env=self.env(**env), capture_output=True, text=True,
                              timeout=timeout)

    def build(self) -> None:
        # A copy, so the build's build/ and *.egg-info never land in the checkout.
        source = self.root / "src"
        shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".venv", ".git", "var", "__pycache__", "build",
                                                                    "*.egg-info", "tests", "bench"))
        wheel = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(self.root / "dist"),
                                str(source)], capture_output=True, text=True, timeout=300, env=self.env())
        assert wheel.returncode == 0, wheel.stdout + wheel.stderr
        [built] = (self.root / "dist").glob("dtq-*.whl")
        venv = subprocess.run([sys.executable, "-m", "venv", str(self.venv)], capture_output=True, text=True,
                              timeout=120)
        assert venv.returncode == 0, venv.stderr
        # The versions the suite runs on, from pip's cache where it has them.
        install = subprocess.run([self.bin("pip"), "install", "-q", "--disable-pip-version-check",
                                  "-c", str(ROOT / "requirements.txt"), f"{built}[web]"],
                                 capture_output=True, text=True, timeout=600, env=self.env())
        assert install.returncode == 0, install.stdout + install.stderr
        self.site.mkdir()
        made = subprocess.run([self.bin("django-admin"), "startproject", "mysite", str(self.site)],
                              cwd=self.root, capture_output=True, text=True, timeout=60, env=self.env())
        assert made.returncode == 0, made.stderr

    def configure(self) -> None:
        package = self.site / "mysite"
        with open(package / "settings.py", "a", encoding="utf-8") as f:
            f.write(SETTINGS_ADDITION)
        with open(package / "urls.py", "a", encoding="utf-8") as f:
            f.write(URLS_ADDITION)
        asgi = (package / "asgi.py").read_text(encoding="utf-8")
        assert ASGI_LINE in asgi, asgi
        wrapped = "from dtq_dashboard.asgi import websocket_application\n" \
                  "application = websocket_application(get_asgi_application())"
        (package / "asgi.py").write_text(asgi.replace(ASGI_LINE, wrapped), encoding="utf-8")
        (package / "tasks.py").write_text(TASKS_MODULE, encoding="utf-8")

    def start(self, args: list[str], log: str, **env: str) -> subprocess.Popen[bytes]:
        with open(self.root / log, "wb") as out:
            proc = subprocess.Popen(args, cwd=self.site, env=self.env(**env), stdout=out, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def log(self, name: str) -> str:
        return (self.root / name).read_text(errors="replace")

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)


def http(url: str, body: dict[str, Any] | bytes | None = None) -> tuple[int, dict[str, str], Any]:
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read() or b"null")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_wheel_runs_in_a_new_startproject_site_with_the_console_under_a_prefix(
        tmp_path: Path, redis_server: Any, key_prefix: str) -> None:
    from playwright.sync_api import sync_playwright

    from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS

    project = UserProject(tmp_path)
    project.build()
    project.configure()
    dtq_env = {"DTQ_REDIS_URL": redis_server.url, "DTQ_KEY_PREFIX": key_prefix, "DTQ_TASK_MODULES": "mysite.tasks"}
    python = project.bin("python")
    for args in (["migrate", "--noinput", "-v", "0"],
                 ["createsuperuser", "--noinput", "--username", "ada", "--email", "ada@example.com"]):
        done = project.run([python, "manage.py", *args], DJANGO_SUPERUSER_PASSWORD=PASSWORD, **dtq_env)
        assert done.returncode == 0, done.stdout + done.stderr

    # The installed `dtq` script without settings: one line, not dtq's own settings and a traceback.
    lost = project.run([project.bin("dtq"), "dlq", "list"], **dtq_env)
    assert lost.returncode == 2
    assert lost.stderr.strip().splitlines() == [
        "dtq: no Django settings: set DJANGO_SETTINGS_MODULE to your project's settings module "
        "(e.g. DJANGO_SETTINGS_MODULE=mysite.settings) and run dtq from the project's directory"]

    settings_env = {**dtq_env, "DJANGO_SETTINGS_MODULE": "mysite.settings"}
    try:
        port = free_port()
        web = project.start([project.bin("daphne"), "-b", "127.0.0.1", "-p", str(port), "mysite.asgi:application"],
                            "daphne.log", **settings_env)
        # From the project's directory, as manage.py runs: no PYTHONPATH=. needed.
        worker = project.start([project.bin("dtq"), "runworker_dtq", "--queues", "default", "--concurrency", "2",
                                "--name", "shop-worker"], "worker.log", **settings_env)
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: web.poll() is None and _answers(f"{base}/ops-api/health"), timeout=60,
                 message=lambda: f"daphne did not start: {project.log('daphne.log')[-3000:]}")
        start_line = wait_for(lambda: next((line for line in project.log("worker.log").splitlines()
                                            if "serving queues=" in line), None), timeout=60,
                              message=lambda: f"no start-up line: {project.log('worker.log')[-3000:]}")
        assert (f"worker_id=shop-worker serving queues=default concurrency=2 redis={redis_server.url} "
                "task_types=") in start_line and "shop.charge" in start_line

        # The API with the project's (empty) REST_FRAMEWORK: dtq's envelope, not DRF's default shape.
        status, _, body = http(f"{base}/ops-api/api/v1/tasks", b"{not json")
        assert status == 400 and body["error"]["code"] == "MALFORMED_JSON", body
        schema = urllib.request.Request(f"{base}/ops-api/api/schema/",
                                        headers={"Accept": "application/vnd.oai.openapi+json"})
        with urllib.request.urlopen(schema, timeout=60) as response:
            assert "/ops-api/api/v1/tasks" in json.loads(response.read())["paths"]

        declined = tmp_path / "declined"
        declined.touch()
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
            page.set_default_timeout(20000)
            failures: list[str] = []
            page.on("response", lambda r: failures.append(f"{r.status} {r.url}") if r.status >= 400 else None)
            page.goto(f"{base}/ops/")
            page.click("header >> text=Log in")
            page.fill("input[name=username]", "ada")
            page.fill("input[name=password]", PASSWORD)
            page.click("button:has-text('Log in')")
            page.wait_for_url(f"{base}/ops/")
            # Styled (console.css came through WhiteNoise) and live (the feed found its WebSocket).
            assert page.evaluate("getComputedStyle(document.querySelector('header.topbar')).display") == "flex"
            page.wait_for_selector("#feed-state[data-state=live]")
            assert page.get_attribute("footer a", "href") == "/ops-api/api/v1/tasks"

            status, _, task = http(f"{base}/ops-api/api/v1/tasks", {
                "type": "shop.charge", "payload": {"amount": 42, "decline_while": str(declined)}})
            assert status == 201, task
            page.wait_for_selector(f'#feed tr[data-event-task="{task["id"]}"] .badge[data-status=DEAD_LETTERED]')
            assert page.get_attribute(f'#feed tr[data-event-task="{task["id"]}"] a', "href") == \
                f"/ops/tasks/{task['id']}/"

            declined.unlink()
            page.click("nav >> text=Dead letters")
            page.wait_for_url(f"{base}/ops/dlq/")
            page.locator(f'tr:has(a[href="/ops/tasks/{task["id"]}/"])').get_by_role("button", name="Retry").click()
            page.wait_for_selector(".msg-success")
            assert "Retried 1 of 1 selected dead letter" in page.inner_text(".messages")
            wait_for(lambda: http(f"{base}/ops-api/api/v1/tasks/{task['id']}")[2]["status"] == "SUCCEEDED",
                     timeout=30, message=lambda: project.log("worker.log")[-3000:])
            assert failures == [], failures
            browser.close()
        assert worker.poll() is None, project.log("worker.log")[-3000:]
    finally:
        project.stop()


def _answers(url: str) -> bool:
    try:
        return http(url)[0] == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False

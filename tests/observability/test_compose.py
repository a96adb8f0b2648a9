"""docker-compose.yml: its shape (Redis AOF, PostgreSQL, migrate once, daphne with a /health
healthcheck, two workers), and the very commands it runs, started here as real processes
against a throwaway Redis (no Docker engine needed)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import environ
import pytest
import yaml

from ..conftest import ROOT, wait_for
from ..redis_server import RedisServer, free_port
from .conftest import parse

COMPOSE = ROOT / "docker-compose.yml"
_VAR = re.compile(r"\$\{(\w+)(?:(:-|:\?)([^}]*))?\}")
# What an operator puts in .env beside the compose file (required variables, ${VAR:?message}).
DOTENV = {"DJANGO_SECRET_KEY": "compose-test-" + "0123456789abcdef" * 4}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def interpolate(value: str, dotenv: dict[str, str] = DOTENV) -> str:
    """Resolve ${VAR:-default} and ${VAR:?error} the way compose does with only `dotenv` set."""
    def one(m: re.Match[str]) -> str:
        if m.group(2) == ":?":
            if not dotenv.get(m.group(1)):
                raise ValueError(f"required variable {m.group(1)} is missing a value: {m.group(3)}")
            return dotenv[m.group(1)]
        return m.group(3) or ""

    return _VAR.sub(one, value)


def service_env(service: dict[str, Any]) -> dict[str, str]:
    return {k: interpolate(str(v)) for k, v in (service.get("environment") or {}).items()}


def test_the_compose_file_has_the_documented_shape(compose: dict[str, Any]) -> None:
    services = compose["services"]
    redis = services["redis"]
    assert redis["image"].startswith("redis:7")
    command = redis["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--appendfsync") + 1] == "everysec"
    assert command[command.index("--stream-node-max-entries") + 1] == "16"  # docs/deployment.md
    assert command[command.index("--hash-max-listpack-value") + 1] == "1024"
    assert any(v.endswith(":/data") for v in redis["volumes"]) and "redis-data" in compose["volumes"]
    assert services["postgres"]["image"].startswith("postgres:")
    assert "migrate" in services["migrate"]["command"]
    workers = [name for name, s in services.items() if "runworker_dtq" in s.get("command", [])]
    assert workers == ["worker-1", "worker-2"]
    for name in ("api", *workers):
        s = services[name]
        assert s["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert s["depends_on"]["redis"]["condition"] == "service_healthy"
        env = service_env(s)
        assert env["DTQ_REDIS_URL"] == "redis://redis:6379/0"
        # DATABASE_URL selects PostgreSQL through psycopg (installed from requirements.txt).
        assert environ.Env.db_url_config(env["DATABASE_URL"])["ENGINE"] == "django.db.backends.postgresql"
    import psycopg  # noqa: F401 - the driver compose relies on is installed

    # No published placeholder key: compose stops with a message when DJANGO_SECRET_KEY is unset.
    with pytest.raises(ValueError, match="DJANGO_SECRET_KEY in .env"):
        interpolate(str(compose["x-dtq-environment"]["DJANGO_SECRET_KEY"]), {})
    api = services["api"]
    assert "daphne" in api["command"] and "/health" in " ".join(api["healthcheck"]["test"])
    # Orchestrator grace period longer than the drain window (docs/deployment.md).
    drain = float(service_env(services["worker-1"])["DTQ_DRAIN_TIMEOUT_S"])
    assert all(float(services[w]["stop_grace_period"].rstrip("s")) > drain for w in workers)


def test_docker_compose_config_accepts_the_file() -> None:
    # `docker compose config` needs no engine; CI machines without a Docker client check the
    # YAML shape above instead (the validation has been run where a client exists).
    for cli in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(cli[0]) and subprocess.run([*cli, "version"], capture_output=True).returncode == 0:
            done = subprocess.run([*cli, "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True,
                                  timeout=60)
            assert done.returncode == 0, done.stderr
            return
    assert yaml.safe_load(COMPOSE.read_text())["services"]


def localize(argv: list[str], port: int) -> list[str]:
    """The compose command, run here: this venv's python, loopback only, a free port."""
    out = [sys.executable if a == "python" else a for a in argv]
    out = ["127.0.0.1" if a == "0.0.0.0" else a for a in out]
    return [str(port) if a == "8000" else a.replace("127.0.0.1:8000", f"127.0.0.1:{port}") for a in out]


def http(url: str, data: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, ConnectionError):
        return 0, b""


def test_the_compose_commands_serve_work_and_metrics(compose: dict[str, Any], redis_server: RedisServer,
                                                     key_prefix: str, tmp_path: Path) -> None:
    services = compose["services"]
    port = free_port()
    env = {**os.environ, **service_env(services["api"]), "DTQ_REDIS_URL": redis_server.url,
           "DTQ_KEY_PREFIX": key_prefix, "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
           "DJANGO_SETTINGS_MODULE": "dtq_site.settings", "PYTHONUNBUFFERED": "1",
           "DTQ_VISIBILITY_TIMEOUT_S": "5", "DTQ_HEARTBEAT_INTERVAL_S": "1", "DTQ_DRAIN_TIMEOUT_S": "5"}
    migrate = subprocess.run(localize(services["migrate"]["command"], port), cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=120)
    assert migrate.returncode == 0, migrate.stderr

    procs: dict[str, subprocess.Popen[bytes]] = {}
    logs = {name: open(tmp_path / f"{name}.log", "wb") for name in ("api", "worker-1", "worker-2")}  # noqa: SIM115
    try:
        for name, log in logs.items():
            # Each in its own session, as in its own container.
            procs[name] = subprocess.Popen(localize(services[name]["command"], port), cwd=ROOT, env=env,
                                           stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: http(base + "/health")[0] == 200, timeout=30,
                 message=lambda: "daphne never served /health: " + (tmp_path / "api.log").read_text()[-2000:])
        # The healthcheck command itself, as the container would run it.
        check = subprocess.run(localize(services["api"]["healthcheck"]["test"][1:], port), cwd=ROOT, env=env,
                               timeout=30)
        assert check.returncode == 0
        assert http(base + "/ready")[0] == 200

        status, body = http(base + "/api/v1/tasks", json.dumps({"type": "dtq.echo", "payload": {"a": 1}}).encode())
        assert status == 201, body
        task_id = json.loads(body)["id"]
        wait_for(lambda: json.loads(http(f"{base}/api/v1/tasks/{task_id}")[1]).get("status") == "SUCCEEDED",
                 timeout=20, message="no worker ran the task")

        def metrics() -> dict[str, list[tuple[dict[str, str], float]]]:
            status, text = http(base + "/metrics")
            return parse(text.decode()) if status == 200 else {}

        wait_for(lambda: metrics().get("dtq_workers_alive") == [({}, 2.0)], timeout=15, message="not 2 workers")
        m = metrics()
        assert m["dtq_redis_up"] == [({}, 1.0)] and m["dtq_scheduler_leader"] == [({}, 1.0)]
        assert ({"queue": "default", "type": "dtq.echo", "outcome": "succeeded"}, 1.0) in m["dtq_tasks_total"]

        # SIGTERM (what `docker compose stop` sends) drains and exits 0 well within the grace period.
        for name in ("worker-1", "worker-2"):
            procs[name].send_signal(signal.SIGTERM)
        for name in ("worker-1", "worker-2"):
            assert procs[name].wait(timeout=30) == 0
        # DTQ_LOG_FORMAT=json is the compose default: the workers' log lines are JSON objects.
        worker_lines = (tmp_path / "worker-1.log").read_text().splitlines()
        records = [json.loads(line) for line in worker_lines if line.startswith("{")]
        assert records and all("worker_id" in r for r in records)
        assert any("stopped" in r["message"] for r in records)
        # The API too: it exits on SIGTERM, leaving nothing of its group.
        procs["api"].send_signal(signal.SIGTERM)
        assert procs["api"].wait(timeout=15) == 0
        wait_for(lambda: not _group_alive(procs["api"].pid), timeout=10, message="the API left a process behind")
    finally:
        for proc in procs.values():
            if proc.poll() is None or _group_alive(proc.pid):
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(10)
        for log in logs.values():
            log.close()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True

"""`make run`: a local persistent Redis (unless DTQ_REDIS_URL is set), daphne and one worker.

State kept under var/ (DTQ_LOCAL_STATE_DIR) across restarts: redis.url (the Redis this uses, read by
manage.py and bin/dtq when DTQ_REDIS_URL is unset), api_key (the local DTQ_API_KEY for destructive
API calls, unless DTQ_API_KEY or DTQ_ALLOW_ANONYMOUS_ADMIN is set) and secret_key (the local
DJANGO_SECRET_KEY: daphne with DEBUG off refuses dtq's public default).

Ctrl-C stops everything in order (worker drains, daphne, then Redis flushes its AOF) and leaves
no process of ours behind. Children get their own sessions so only this script signals them.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PY = sys.executable
# Overridable so the suite can run this script without touching a developer's port 6380.
REDIS_PORT = int(os.environ.get("DTQ_LOCAL_REDIS_PORT", "6380"))
PR_SET_PDEATHSIG = 1  # prctl(2)
STATE_DIR = Path(os.environ.get("DTQ_LOCAL_STATE_DIR") or ROOT / "var")  # as dtq_site.settings reads it
REDIS_DIR = Path(os.environ.get("DTQ_LOCAL_REDIS_DIR") or STATE_DIR / "redis")

from dtq_core.conf import read_environment  # noqa: E402 - needs ROOT on sys.path
from dtq_core.config import ConfigError, DtqConfig  # noqa: E402


def say(line: str) -> None:
    print(f"dtq: {line}", flush=True)


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read, replacing it whole (a reader never sees half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # the mode above applies only to a new file, not a leftover partial one
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text + "\n")
    os.replace(partial, path)


def local_secret(path: Path) -> str:
    """The secret stored at `path`, made (64 hex digits, mode 0600) the first time."""
    if path.is_file():
        value = path.read_text(encoding="utf-8").strip()
        if value:
            return value
    value = secrets.token_hex(32)
    write_private(path, value)
    return value


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    # A session of its own, so Ctrl-C reaches this process alone and it stops the children in
    # order; and, on Linux, SIGTERM to the child when this process dies however it dies (kill -9,
    # a crash), or the children would outlive it holding their ports.
    return subprocess.Popen(args, cwd=ROOT, env=env, start_new_session=True,
                            preexec_fn=_die_with(os.getpid()) if sys.platform == "linux" else None)


def _die_with(parent: int) -> Callable[[], None]:
    def set_parent_death_signal() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the prctl: nobody would signal us
            os._exit(1)
    return set_parent_death_signal


def stop(proc: subprocess.Popen[bytes] | None, name: str, timeout: float) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        say(f"{name} did not stop in {timeout:.0f}s; killing it")
        proc.kill()
        proc.wait(5)


def wait_for_redis(url: str, proc: subprocess.Popen[bytes] | None, stopping: Callable[[], bool]) -> bool:
    """Wait until Redis answers PING; False if it never will (our redis-server exited or never
    opened its port, or Ctrl-C). A Redis restarted on existing data answers LOADING until its
    dataset is in memory, which takes as long as it takes: starting the worker and daphne then
    would only have them fail."""
    import redis

    from dtq_core.connection import sync_client  # a redis+sentinel:// URL too

    client = sync_client(DtqConfig(redis_url=url, redis_timeout_s=2))
    deadline = time.monotonic() + 10  # to open its port; loading has no deadline
    loading_since = next_progress = 0.0
    try:
        while not stopping():
            try:
                client.ping()
                if loading_since:
                    say(f"redis finished loading its dataset after {time.monotonic() - loading_since:.0f}s")
                return True
            except redis.exceptions.BusyLoadingError:
                now = time.monotonic()
                if not loading_since:
                    loading_since, next_progress = now, now + 10
                    say(f"redis is loading its dataset into memory ({loading_progress(client)}); "
                        "daphne and the worker start once it has")
                elif now >= next_progress:
                    next_progress = now + 10
                    say(f"redis is still loading its dataset ({loading_progress(client)})")
            except redis.exceptions.RedisError:
                if proc is None:
                    return True  # someone else's Redis: the worker and /ready say what is wrong with it
                if proc.poll() is not None or time.monotonic() > deadline:
                    return False
            time.sleep(0.1)
        return False
    finally:
        client.close()


def loading_progress(client: Any) -> str:
    try:
        info = client.info("persistence")
        done, total = float(info.get("loading_loaded_perc", 0)), int(info.get("loading_total_bytes", 0))
        return f"{done:.0f}% of {total / 2**20:.0f} MB"
    except Exception:  # noqa: BLE001 - progress is a nicety
        return "progress unknown"


def main() -> int:
    env = dict(os.environ)
    try:
        config = read_environment()  # the one line naming a bad DTQ_* variable, before anything starts
    except ConfigError as exc:
        sys.stderr.write(f"dtq: invalid configuration: {exc}\n")
        return 2
    try:
        port = int(env.get("PORT", "8000"))
        if not 0 < port < 65536:
            raise ValueError
    except ValueError:
        sys.stderr.write(f"dtq: invalid configuration: PORT must be a TCP port, 1-65535 (got {env['PORT']!r})\n")
        return 2
    redis_proc = None
    stopping = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    # SIGHUP: the terminal closed (an SSH session lost); SIGQUIT: Ctrl-\. Both stop everything,
    # as Ctrl-C does, instead of leaving the children running without this process.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, on_signal)
    if port_open(port):  # before anything starts or var/redis.url is rewritten
        say(f"port {port} is already in use; stop that process or run on another: PORT=8001 make run")
        return 1
    if not env.get("DTQ_REDIS_URL"):
        binary = shutil.which("redis-server")
        if binary is None:
            say("no redis-server found. Install one (Debian/Ubuntu: sudo apt-get install redis-server),")
            say("or point DTQ_REDIS_URL at a reachable Redis >= 7, or run everything with: docker compose up")
            return 1
        if port_open(REDIS_PORT):
            say(f"port {REDIS_PORT} is already in use; stop that process or set DTQ_REDIS_URL to use it")
            return 1
        data = REDIS_DIR
        data.mkdir(parents=True, exist_ok=True)
        redis_proc = start([binary, "--port", str(REDIS_PORT), "--bind", "127.0.0.1", "--dir", str(data),
                            "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
                            "--maxmemory-policy", "noeviction",
                            # Streams in nodes of 16 entries: fewer Redis instructions per task. Task records
                            # with a payload up to 1 KB as one listpack: about half the memory of a queued,
                            # running or failed task, for 4-9 % more Redis instructions for it
                            # (docs/deployment.md, "Redis persistence").
                            "--stream-node-max-entries", "16", "--hash-max-listpack-value", "1024",
                            "--logfile", str(data / "redis.log")], env)
        env["DTQ_REDIS_URL"] = f"redis://127.0.0.1:{REDIS_PORT}/0"
        say(f"persistent redis on 127.0.0.1:{REDIS_PORT} (AOF everysec, data in {data}) pid {redis_proc.pid}")
    if not wait_for_redis(env["DTQ_REDIS_URL"], redis_proc, lambda: stopping):
        if not stopping:
            say(f"redis-server failed to start; see {REDIS_DIR / 'redis.log'}")
        stop(redis_proc, "redis-server", 15)
        return 0 if stopping else 1
    write_private(STATE_DIR / "redis.url", env["DTQ_REDIS_URL"])  # bin/dtq and manage.py read this Redis too
    if not env.get("DJANGO_SECRET_KEY"):
        env["DJANGO_SECRET_KEY"] = local_secret(STATE_DIR / "secret_key")
    api_key, key_from = env.get("DTQ_API_KEY", ""), "from DTQ_API_KEY"
    anonymous = env.get("DTQ_ALLOW_ANONYMOUS_ADMIN", "").strip().lower() in ("1", "true", "yes", "on")
    if not api_key and not anonymous:
        api_key = env["DTQ_API_KEY"] = local_secret(STATE_DIR / "api_key")
        key_from = f"kept in {STATE_DIR / 'api_key'}"
    daphne = start([PY, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "dtq_site.asgi:application"], env)
    worker = start([PY, "manage.py", "runworker_dtq"], env)
    say(f"daphne pid {daphne.pid}, worker pid {worker.pid}")
    say(f"console    http://127.0.0.1:{port}/")
    say(f"API        http://127.0.0.1:{port}/api/v1/   (schema: /api/schema/, metrics: /metrics)")
    say(f"WebSocket  ws://127.0.0.1:{port}/ws/events")
    if api_key:
        say(f"API key    {api_key}   ({key_from}; destructive API calls need it)")
        say(f"           curl -X POST -H 'X-API-Key: {api_key}' http://127.0.0.1:{port}/api/v1/queues/default/pause")
    else:
        say("API        DTQ_ALLOW_ANONYMOUS_ADMIN is on: destructive API calls need no key")
    say(f"operator   bin/dtq queue list   (reads this Redis through {STATE_DIR / 'redis.url'})")
    say("staff user: .venv/bin/python manage.py createsuperuser   (Ctrl-C stops everything)")

    code = 0
    while not stopping:
        for proc, name in ((daphne, "daphne"), (worker, "worker"), (redis_proc, "redis-server")):
            if proc is not None and proc.poll() is not None:
                say(f"{name} exited with code {proc.returncode}; stopping the rest")
                stopping, code = True, 1
        time.sleep(0.2)
    say("stopping: worker drains, then daphne, then redis")
    stop(worker, "worker", config.drain_timeout_s + 5)
    stop(daphne, "daphne", 10)
    stop(redis_proc, "redis-server", 15)
    return code


if __name__ == "__main__":
    sys.exit(main())

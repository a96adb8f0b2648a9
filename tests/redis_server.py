"""A throwaway redis-server on a free loopback port, which tests may kill, pause and restart."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    def __init__(self, directory: Path, *, appendonly: bool = True, port: int | None = None,
                 args: Sequence[str] = (), wrapper: Sequence[str] = ()) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server not found: apt-get install redis-server")
        self.binary = binary
        self.directory = directory
        self.appendonly = appendonly
        self.args = list(args)  # more redis-server options, e.g. ["--maxmemory-policy", "allkeys-lru"]
        self.wrapper = list(wrapper)  # a command to run it under, e.g. valgrind (bench/bench_script_cost.py)
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, *, wait: bool = True) -> RedisServer:
        """Start it; with wait=False, return before it answers (e.g. while it loads its data)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        args = [*self.wrapper, self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", str(self.directory), "--save", "", "--appendonly", "yes" if self.appendonly else "no",
                "--appendfsync", "everysec",
                "--daemonize", "no", "--logfile", str(self.directory / "redis.log"), "--protected-mode", "yes",
                *self.args]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 10.0) -> None:
        client = redis.Redis(port=self.port, socket_timeout=0.5, socket_connect_timeout=0.5)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if client.ping():
                    return
            except (redis.ConnectionError, redis.TimeoutError, redis.exceptions.BusyLoadingError):
                pass
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited: {(self.directory / 'redis.log').read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not become ready")
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL: what a crash looks like (AOF keeps what was fsynced)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def pause(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.resume()
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

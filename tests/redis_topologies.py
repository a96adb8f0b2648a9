"""Throwaway Redis topologies on loopback: a Sentinel setup (a master, 2 replicas, 3 sentinels) and
a Redis Cluster (3 masters, 3 replicas), with a helper that SIGKILLs the current master and waits
until a replica's promotion is visible. Every process is started here and stopped by its PID;
the directories are the caller's (tmp_path_factory removes them).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from .redis_server import RedisServer

HOST = "127.0.0.1"
# Replication without a 5 s wait for more replicas before a full sync, so a replica attached (or
# reconfigured by a failover) is in sync within milliseconds; no persistence to slow anyone down.
REPLICATION_ARGS = ("--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")
DOWN_AFTER_MS = 1000  # a master silent this long is down (sentinel's default is 30 s)
FAILOVER_TIMEOUT_MS = 3000


def free_ports(count: int) -> list[int]:
    """Distinct free ports, all chosen before any is used: one at a time, a port picked for a
    server that has not bound it yet could be handed out again."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind((HOST, 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def poll(check: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.05) -> Any:
    """Call check() until it returns something truthy; connection errors count as not yet."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = check()
            if value:
                return value
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError, OSError) as exc:
            last = exc
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout:g}s" + (f" (last error: {last})" if last else ""))
        time.sleep(interval)


def client(port: int, **kwargs: Any) -> redis.Redis:
    return redis.Redis(host=HOST, port=port, socket_timeout=1, socket_connect_timeout=1, decode_responses=True,
                       **kwargs)


def role(port: int) -> str:
    return str(client(port).execute_command("ROLE")[0])


def link_up(port: int) -> bool:
    """A replica whose link to its master is up (and has loaded what the master sent)."""
    info = client(port).info("replication")
    return info.get("role") == "slave" and info.get("master_link_status") == "up"


class SentinelProcess:
    """`redis-server sentinel.conf --sentinel` on a free port."""

    def __init__(self, directory: Path, port: int, myid: str) -> None:
        self.directory, self.port, self.myid = directory, port, myid
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, config: list[str]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        conf = self.directory / "sentinel.conf"  # sentinel rewrites it as it learns: writable, its own
        conf.write_text("\n".join([
            f"port {self.port}", f"bind {HOST}", "daemonize no", f"dir {self.directory}",
            f"logfile {self.directory / 'sentinel.log'}", f"sentinel myid {self.myid}", *config]) + "\n")
        binary = shutil.which("redis-server")
        assert binary is not None, "redis-server not found: apt-get install redis-server"
        self.process = subprocess.Popen([binary, str(conf), "--sentinel"], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)

    def client(self) -> redis.Redis:
        return client(self.port)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


class SentinelSetup:
    """One master, two replicas and three sentinels (quorum 2) that fail over within seconds."""

    SERVICE = "dtq-master"

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.servers: list[RedisServer] = []
        self.sentinels: list[SentinelProcess] = []

    def start(self) -> SentinelSetup:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        ports = free_ports(6)
        master = RedisServer(self.directory / "redis-0", appendonly=False, args=REPLICATION_ARGS, port=ports[0])
        self.servers = [master, *(RedisServer(self.directory / f"redis-{i}", appendonly=False, port=ports[i],
                                              args=[*REPLICATION_ARGS, "--replicaof", HOST, str(master.port)])
                                  for i in (1, 2))]
        for server in self.servers:
            server.start(wait=False)
        ids = [uuid.uuid4().hex + uuid.uuid4().hex[:8] for _ in range(3)]  # 40 hex digits, as sentinel's
        self.sentinels = [SentinelProcess(self.directory / f"sentinel-{i}", ports[3 + i], ids[i]) for i in range(3)]
        # Told who the replicas and the other sentinels are, sentinels need not discover them
        # (INFO every 10 s, hellos every 2 s): ready, and able to agree on a failover, at once.
        for me in self.sentinels:
            me.start([f"sentinel monitor {self.SERVICE} {HOST} {master.port} 2",
                      f"sentinel down-after-milliseconds {self.SERVICE} {DOWN_AFTER_MS}",
                      f"sentinel failover-timeout {self.SERVICE} {FAILOVER_TIMEOUT_MS}",
                      f"sentinel parallel-syncs {self.SERVICE} 2",
                      *(f"sentinel known-replica {self.SERVICE} {HOST} {s.port}" for s in self.servers[1:]),
                      *(f"sentinel known-sentinel {self.SERVICE} {HOST} {peer.port} {peer.myid}"
                        for peer in self.sentinels if peer is not me)])
        for server in self.servers:
            server.wait_ready()
        for server in self.servers[1:]:
            poll(lambda port=server.port: link_up(port), timeout=10, what=f"replica {server.port} in sync")
        for sentinel in self.sentinels:
            poll(lambda s=sentinel: self._sees_everyone(s), timeout=10, what=f"sentinel {sentinel.port} ready")

    def _sees_everyone(self, sentinel: SentinelProcess) -> bool:
        c = sentinel.client()
        state = c.sentinel_master(self.SERVICE)
        replicas = c.sentinel_slaves(self.SERVICE)
        return (int(state["num-other-sentinels"]) == 2 and len(replicas) == 2
                and not any(r["is_sdown"] or r["is_disconnected"] for r in replicas)
                and state["is_master"] and not state["is_sdown"])

    @property
    def url(self) -> str:
        return self.url_for()

    def url_for(self, db: int = 0) -> str:
        sentinels = ",".join(f"{HOST}:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{sentinels}/{self.SERVICE}/{db}"

    def master_ports(self) -> set[int]:
        """The master's port as each sentinel reports it (one port once they agree)."""
        return {int(s.client().sentinel_get_master_addr_by_name(self.SERVICE)[1]) for s in self.sentinels}

    def master_port(self) -> int:
        ports = self.master_ports()
        if len(ports) != 1:
            raise RuntimeError(f"the sentinels disagree about the master: {sorted(ports)}")
        return ports.pop()

    def server(self, port: int) -> RedisServer:
        return next(s for s in self.servers if s.port == port)

    def master(self) -> RedisServer:
        return self.server(self.master_port())

    def kill_master(self, *, timeout: float = 20.0, replicas: int = 1) -> RedisServer:
        """SIGKILL the master and wait until every sentinel names a promoted replica, which says
        ROLE master, and `replicas` replicas replicate it again. Returns the new master."""
        old = self.master()
        old.kill()

        def promoted() -> int | None:
            ports = self.master_ports()  # during the failover, some sentinels still name the old one
            port = ports.pop() if len(ports) == 1 else old.port
            return port if port != old.port and role(port) == "master" else None

        new = self.server(poll(promoted, timeout=timeout, what="a replica promoted by the sentinels"))
        if replicas:
            poll(lambda: int(client(new.port).info("replication")["connected_slaves"]) >= replicas
                 and all(link_up(s.port) for s in self.servers if s.process and s.process.poll() is None
                         and s is not new), timeout=timeout, what="the replicas following the new master")
        return new

    def stop(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop()
        for server in self.servers:
            server.stop()


class ClusterSetup:
    """A Redis Cluster of 3 masters, each with one replica, made by `redis-cli --cluster create`."""

    NODE_TIMEOUT_MS = 1000  # a master silent this long is failing: its replica takes over

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.servers: list[RedisServer] = []

    def start(self) -> ClusterSetup:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        ports = free_ports(12)
        self.servers = [self._node(i, ports[i], ports[6 + i]) for i in range(6)]
        for server in self.servers:
            server.start(wait=False)
        for server in self.servers:
            server.wait_ready()
        cli = shutil.which("redis-cli")
        assert cli is not None, "redis-cli not found: apt-get install redis-tools"
        done = subprocess.run([cli, "--cluster", "create", *(f"{HOST}:{s.port}" for s in self.servers),
                               "--cluster-replicas", "1", "--cluster-yes"], capture_output=True, text=True,
                              timeout=60, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {done.stdout[-2000:]} {done.stderr[-2000:]}")
        self.wait_healthy(timeout=20)

    def _node(self, index: int, port: int, bus_port: int) -> RedisServer:
        directory = self.directory / f"node-{index}"
        # The bus port is the data port + 10000 unless named: name a free one (a port from the
        # ephemeral range plus 10000 can be past 65535).
        return RedisServer(directory, appendonly=False, port=port, args=[
            *REPLICATION_ARGS, "--cluster-enabled", "yes", "--cluster-config-file", str(directory / "nodes.conf"),
            "--cluster-node-timeout", str(self.NODE_TIMEOUT_MS), "--cluster-port", str(bus_port)])

    def add_replica(self, master: RedisServer, *, timeout: float = 20.0) -> RedisServer:
        """Start one more node as a second replica of `master` (redis-cli --cluster add-node
        --cluster-slave), so that its shard still has a replica once one of them is promoted."""
        server = self._node(len(self.servers), *free_ports(2))
        self.servers.append(server)
        server.start()
        cli = shutil.which("redis-cli")
        assert cli is not None, "redis-cli not found: apt-get install redis-tools"
        master_id = str(client(master.port).cluster("myid"))
        done = subprocess.run([cli, "--cluster", "add-node", f"{HOST}:{server.port}", f"{HOST}:{master.port}",
                               "--cluster-slave", "--cluster-master-id", master_id], capture_output=True, text=True,
                              timeout=60, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster add-node failed: {done.stdout[-2000:]} {done.stderr[-2000:]}")
        poll(lambda: link_up(server.port), timeout=timeout, what=f"replica {server.port} in sync")
        self.wait_healthy(timeout=timeout)
        return server

    def wait_healthy(self, *, timeout: float) -> None:
        """Every live node says cluster_state:ok and every replica's link is up."""
        for server in self.live():
            poll(lambda port=server.port: client(port).cluster("info")["cluster_state"] == "ok", timeout=timeout,
                 what=f"cluster_state:ok on {server.port}")
        for server in self.live():
            if role(server.port) == "slave":
                poll(lambda port=server.port: link_up(port), timeout=timeout, what=f"replica {server.port} in sync")

    def live(self) -> list[RedisServer]:
        return [s for s in self.servers if s.process is not None and s.process.poll() is None]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"{HOST}:{s.port}" for s in self.servers[:3])

    def masters(self) -> list[RedisServer]:
        return [s for s in self.live() if role(s.port) == "master"]

    def kill_master(self, master: RedisServer | None = None, *, timeout: float = 20.0,
                    on_kill: Callable[[], object] = lambda: None) -> RedisServer:
        """SIGKILL a master (the first by default), call on_kill, and wait until one of its
        replicas says ROLE master and the cluster is ok again on every live node. Returns the
        promoted replica."""
        master = master or self.masters()[0]
        replicas = [s for s in self.live() if s is not master and role(s.port) == "slave"
                    and int(client(s.port).info("replication")["master_port"]) == master.port]
        master.kill()
        on_kill()
        promoted = poll(lambda: next((r for r in replicas if role(r.port) == "master"), None), timeout=timeout,
                        what=f"a replica of {master.port} promoted")
        for server in self.live():
            poll(lambda port=server.port: client(port).cluster("info")["cluster_state"] == "ok", timeout=timeout,
                 what=f"cluster_state:ok on {server.port} after the failover")
        return promoted

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

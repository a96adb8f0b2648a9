"""The hot-path scripts' Redis function libraries on the server (dtq_core/scripts/library.py):
which are loaded, and removing those no process of this version calls.

Each dtq version loads its own libraries (their names carry a hash of their source), about
150 KB of Redis memory a version, replicated and persisted with the data; an upgrade leaves the
old version's behind. Pruning them is safe at any time: a process of another version that still
runs finds its library missing at its next call and loads it again (one round trip), as after a
FUNCTION FLUSH. On Redis Cluster every master holds its own copy, so both act on every master.
"""

from __future__ import annotations

import builtins
import re
from typing import Any

import redis
import redis.cluster

from ..scripts import LIBRARIES
from .audit import Actor, Audit
from .plumbing import Noun, Plumbing

# dtq_<script>_<16 hex digits of its source's hash>: what library.build names a library. Nothing
# else on the server is listed or deleted, whatever its name starts with.
DTQ_LIBRARY = re.compile(r"^dtq_[A-Za-z]+_[0-9a-f]{16}$")


class Functions(Noun):
    """List and prune the function libraries of dtq versions on the server."""

    def __init__(self, plumbing: Plumbing, audit: Audit) -> None:
        super().__init__(plumbing)
        self.audit = audit

    def list(self) -> builtins.list[dict[str, Any]]:
        """Every dtq library loaded (on a cluster, on any master): name, whether this version calls
        it, and on how many masters it is."""
        return _listing(self._per_master())

    def prune(self, actor: Actor, *, dry_run: bool = False) -> builtins.list[str]:
        """Delete every dtq library this version does not call (audited as functions.prune);
        return their names. dry_run: only name them."""
        per_master = self._per_master()
        stale = [item["name"] for item in _listing(per_master) if not item["current"]]
        if dry_run or not stale:
            return stale
        with self.audit.operation(actor, "functions.prune", "functions", selected=len(stale),
                                  selection={"libraries": stale}) as op:
            for node, names in per_master.items():
                for name in names:
                    if name in stale:
                        self._delete(node, name)
            op.done = len(stale)
        return stale

    def _per_master(self) -> dict[Any, builtins.list[str]]:
        """The dtq libraries of each master (the one node of a single Redis or Sentinel's master)."""
        client: Any = self.client  # redis-py leaves execute_command unannotated
        if isinstance(client, redis.cluster.RedisCluster):
            replies = client.execute_command("FUNCTION", "LIST", "LIBRARYNAME", "dtq_*",
                                             target_nodes=redis.cluster.RedisCluster.PRIMARIES)
            return {node: _names(reply) for node, reply in replies.items()}
        return {None: _names(client.execute_command("FUNCTION", "LIST", "LIBRARYNAME", "dtq_*"))}

    def _delete(self, node: Any, name: str) -> None:
        client: Any = self.client
        try:
            if node is None:
                client.execute_command("FUNCTION", "DELETE", name)
            else:  # a cluster's master, by the name its FUNCTION LIST reply came under
                target = client.get_node(node_name=node) if isinstance(node, str) else node
                client.execute_command("FUNCTION", "DELETE", name, target_nodes=target)
        except redis.exceptions.ResponseError as exc:
            if "not found" not in str(exc).lower():  # deleted meanwhile (another prune): the same end
                raise


def _listing(per_master: dict[Any, builtins.list[str]]) -> builtins.list[dict[str, Any]]:
    """Each library once: this version's first, then the others, by name."""
    current = {library.function for library in LIBRARIES.values()}
    found: dict[str, int] = {}
    for names in per_master.values():
        for name in names:
            found[name] = found.get(name, 0) + 1
    return [{"name": name, "current": name in current, "masters": masters}
            for name, masters in sorted(found.items(), key=lambda item: (item[0] not in current, item[0]))]


def _names(reply: Any) -> builtins.list[str]:
    names = []
    for library in reply or []:
        name = library.get("library_name") if isinstance(library, dict) else None
        if isinstance(name, bytes):
            name = name.decode()
        if isinstance(name, str) and DTQ_LIBRARY.match(name):
            names.append(name)
    return names

"""Lua scripts, read once at import and registered once per client (EVALSHA, reload on NOSCRIPT).

A line `-- #include NAME` inlines includes/NAME.lua (itself expanded), so shared helpers live in one file.
A script's file name is `verbNoun-N.lua`, N its number of KEYS: every call, whether through
`Scripts.__call__`, `call_direct` or a command packed for a pipeline (`command`), is checked
against N (BullMQ's loader does the same), so a caller that forgets a key fails loudly instead
of the script reading a nil key or an ARGV as a key.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from importlib.resources import files
from typing import Any

import redis
import redis.asyncio as aioredis
import redis.asyncio.cluster as aiocluster
from redis.crc import key_slot

from ..replication import NO_WAIT, Replication
from ..routing import Routed, exchange_routed, is_cluster
from ..wire import pack
from .library import FUNCTION_SCRIPTS, Library, build, functions_refused, is_unknown, refuse_functions

_INCLUDE = re.compile(r"^-- #include (\w+)$", re.MULTILINE)
_ROOT = files(__package__)


def _expand(source: str) -> str:
    # An include may include another (common includes retain): expanded until none is left.
    return _INCLUDE.sub(lambda m: _expand((_ROOT / "includes" / f"{m.group(1)}.lua").read_text()), source)


def _split(filename: str) -> tuple[str, int]:
    name, _, n = filename.removesuffix(".lua").rpartition("-")
    return name, int(n)


_FILES = sorted(p.name for p in _ROOT.iterdir() if p.name.endswith(".lua"))
SOURCES: dict[str, str] = {_split(f)[0]: _expand((_ROOT / f).read_text()) for f in _FILES}
#: The hot-path scripts also as Redis function libraries (library.py): what Scripts.command sends.
LIBRARIES: dict[str, Library] = {_split(f)[0]: build(_split(f)[0], (_ROOT / f).read_text(), _expand)
                                 for f in _FILES if _split(f)[0] in FUNCTION_SCRIPTS}
#: Each script's number of KEYS, from the `-N` suffix of its file name.
NUMKEYS: dict[str, int] = dict(_split(f) for f in _FILES)


class ScriptKeyCountError(TypeError):
    """A script was called with another number of keys than its file name declares."""


class CrossSlotKeys(TypeError):
    """A script was called with keys in more than one hash slot (Redis Cluster refuses the call,
    and a single node would hide the mistake until then)."""


def check_keys(name: str, keys: Sequence[str]) -> None:
    """Raise unless `keys` has exactly as many keys as script `name` declares, all in one slot
    (most scripts take one key, a partition's prefix, and build the rest inside that slot)."""
    if len(keys) != NUMKEYS[name]:
        raise ScriptKeyCountError(f"script {name}-{NUMKEYS[name]} takes {NUMKEYS[name]} keys, got {len(keys)}")
    if len(keys) > 1 and len({key_slot(str(k).encode()) for k in keys}) > 1:
        raise CrossSlotKeys(f"script {name} called with keys in different hash slots: {list(keys)}")


# On a Redis Cluster, each script call declares one more key than its script reads: a name in the
# slot of its first key that never exists. While that slot migrates between masters, Redis then
# answers TRYAGAIN for the call on both of them (on the source some declared keys are missing; on
# the target, behind ASKING, a call of several keys with one missing is refused), so no script runs
# until the slot has moved. Without it, a call whose only declared key is a partition's prefix
# (never a real key) was sent by ASK to the importing master, and ran there on empty keys while the
# partition's streams and records were still on the source: a queue split in two, completions lost
# (docs/deployment.md#resharding). Keys without a hash tag are single real keys a script reads
# alone; Redis's own ASK rules hold for them.
SLOT_GUARD = "~slot-guard"


def slot_guarded(keys: Sequence[str]) -> list[str]:
    """The keys a script call declares on a cluster: its own, and the guard of the first's slot."""
    first = str(keys[0]) if keys else ""
    if not _has_hash_tag(first):
        return list(keys)
    return [*keys, first + SLOT_GUARD]


def _has_hash_tag(key: str) -> bool:
    """Whether Redis hashes only a part of key ({...}, non-empty: the first such): then a suffix
    leaves its slot alone. Any other key hashes whole, and a suffix would move it."""
    start = key.find("{")
    return start >= 0 and key.find("}", start + 1) > start + 1


def load(client: Any, name: str) -> Any:
    """Load script `name` where `client` points (on a cluster, every master): its function
    library when it has one (unless this client's Redis refuses functions: library.py), and its
    EVAL source (redis-py's Script objects call that). For an asyncio client, await the result."""
    if name not in LIBRARIES or functions_refused(client):
        return client.script_load(SOURCES[name])
    if isinstance(client, (aioredis.Redis, aiocluster.RedisCluster)):
        return _aload_with_library(client, name)
    try:
        client.function_load(LIBRARIES[name].source, replace=True)
    except redis.exceptions.ResponseError as exc:
        refuse_functions(client, exc)
    return client.script_load(SOURCES[name])


def load_on(client: redis.cluster.RedisCluster, name: str, node: Any) -> None:
    """load() on one master of a cluster (blocking client): where a call found the script
    missing while another master is down (load() would stop at the down one)."""
    if name in LIBRARIES and not functions_refused(client):
        try:
            client.execute_command("FUNCTION LOAD", "REPLACE", LIBRARIES[name].source, target_nodes=node)
        except redis.exceptions.ResponseError as exc:
            refuse_functions(client, exc)
    client.execute_command("SCRIPT LOAD", SOURCES[name], target_nodes=node)


async def _aload_with_library(client: Any, name: str) -> Any:
    try:
        await client.function_load(LIBRARIES[name].source, replace=True)
    except redis.exceptions.ResponseError as exc:
        refuse_functions(client, exc)
    return await client.script_load(SOURCES[name])


async def _awaitable(value: Any) -> Any:
    """An asyncio caller awaits a pipelined script call (redis-py's AsyncScript is a coroutine)."""
    return value


def _queued_commands(pipe: Any) -> list[tuple[Any, ...]]:
    """The arguments of the commands a pipeline holds, in order. redis-py's cluster pipeline keeps
    them in its execution strategy (redis-py is pinned in requirements.txt)."""
    strategy = getattr(pipe, "_execution_strategy", None)
    if strategy is not None:
        return [tuple(command.args) for command in strategy._command_queue]
    return [tuple(command[0]) for command in pipe.command_stack]


class Scripts:
    """Named scripts bound to one client (sync or asyncio; redis-py picks the right Script).

    replication: what call_direct's writes wait for (DTQ_REDIS_MIN_REPLICAS; replication.py).
    """

    def __init__(self, client: Any, replication: Replication = NO_WAIT) -> None:
        self._client = client
        self.replication = replication
        self._cluster = is_cluster(client)
        self._fns = {name: client.register_script(src) for name, src in SOURCES.items()}

    def __call__(self, name: str, *, keys: list[str], args: list[object], client: Any = None) -> Any:
        check_keys(name, keys)
        if not self._cluster:
            return self._fns[name](keys=keys, args=args, client=client)
        declared = slot_guarded(keys)
        if client is not None:
            # redis-py refuses EVALSHA in a cluster pipeline by name, not by routing: the generic
            # command routes by its first key like any other. NOSCRIPT: see execute().
            queued = client.execute_command("EVALSHA", self._fns[name].sha, len(declared), *declared, *args)
            return _awaitable(queued) if isinstance(self._client, aiocluster.RedisCluster) else queued
        return self._fns[name](keys=declared, args=args)

    def execute(self, pipe: Any, *, raise_on_error: bool = True) -> list[Any]:
        """Run a pipeline that holds script calls (blocking clients). A script its node does not
        know (a promoted replica after a failover, SCRIPT FLUSH) did not run: load every script
        and send that call again, alone."""
        stack = _queued_commands(pipe)
        replies = pipe.execute(raise_on_error=False)
        missing = [i for i, reply in enumerate(replies) if is_unknown(reply)]
        if missing:
            self.load_all()
            for i in missing:
                try:
                    replies[i] = self._client.execute_command(*stack[i])
                except redis.exceptions.ResponseError as exc:
                    replies[i] = exc
        if raise_on_error:
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
        return list(replies)

    async def aexecute(self, pipe: Any, *, raise_on_error: bool = True) -> list[Any]:
        """execute() for asyncio clients."""
        stack = _queued_commands(pipe)
        replies = await pipe.execute(raise_on_error=False)
        missing = [i for i, reply in enumerate(replies) if is_unknown(reply)]
        if missing:
            for name in SOURCES:
                await load(self._client, name)
            for i in missing:
                try:
                    replies[i] = await self._client.execute_command(*stack[i])
                except redis.exceptions.ResponseError as exc:
                    replies[i] = exc
        if raise_on_error:
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
        return list(replies)

    def load_all(self) -> None:
        """Load every script and function library (on a cluster, on every master)."""
        for name in SOURCES:
            load(self._client, name)

    def command(self, name: str, *, keys: Sequence[str], args: Sequence[object]) -> bytes:
        """One EVALSHA packed by hiredis (an FCALL for a script of LIBRARIES), for callers that
        pipeline their own commands (the caller handles a reply that says the node lacks it,
        library.is_unknown, by loading it and sending again)."""
        check_keys(name, keys)
        if self._cluster:
            keys = slot_guarded(keys)
        library = LIBRARIES.get(name)
        if library is not None and not functions_refused(self._client):
            return pack(["FCALL", library.function, len(keys), *keys, *args])
        return pack(["EVALSHA", self._fns[name].sha, len(keys), *keys, *args])

    def routed(self, name: str, *, keys: Sequence[str], args: Sequence[object]) -> Routed:
        """command() with its routing key (KEYS[1]), for dtq_core.routing's exchanges."""
        return str(keys[0]) if keys else "", self.command(name, keys=keys, args=args)

    def call_direct(self, name: str, *, keys: list[str], args: list[object]) -> Any:
        """EVALSHA packed by hiredis and sent on a pooled connection (blocking clients only): the
        same call as __call__ without redis-py's per-command wrappers, for acknowledged writes
        (submit, an operator action's outcome). With DTQ_REDIS_MIN_REPLICAS, the WAIT rides in
        the same exchange (routed with the script, so it goes down the same connection), and too
        few replicas raise ReplicationTimeout once the write is made."""
        (reply,) = self.call_direct_many([(name, keys, args)])
        if isinstance(reply, Exception):
            raise reply
        return reply

    def call_direct_many(self, calls: Sequence[tuple[str, Sequence[str], Sequence[object]]], *,
                         each_master: bool = False) -> list[Any]:
        """Several call_direct calls, (name, keys, args) each, in one exchange: one write per node
        (a redis-py pipeline of scripts first asks SCRIPT EXISTS, a second round trip). With
        DTQ_REDIS_MIN_REPLICAS a WAIT rides behind the calls of each node, down their connection;
        too few replicas raise ReplicationTimeout once the writes are made. Replies in order, an
        error reply as its exception. each_master (a cluster): a master that does not answer gives
        its calls its connection error as their reply, and the others' calls stand
        (routing.exchange_routed)."""
        commands = [self.routed(name, keys=keys, args=args) for name, keys, args in calls]
        replies, acked = self._exchange_with_waits(commands, each_master)
        missing = [i for i, reply in enumerate(replies) if is_unknown(reply)]
        if missing:  # Redis restarted, failed over, SCRIPT or FUNCTION FLUSH: those calls did not run
            missing = self._load_for(calls, commands, missing, replies, each_master)
        if missing:
            # Packed again: an FCALL is an EVALSHA now if the load found functions refused.
            resent = [self.routed(name, keys=keys, args=args) for name, keys, args in (calls[i] for i in missing)]
            again, acked_again = self._exchange_with_waits(resent, each_master)
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
            acked += [(reply, [missing[j] for j in covered]) for reply, covered in acked_again]
        for reply, covered in acked:
            if not each_master:
                self.replication.check(reply)
            elif isinstance(reply, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
                continue  # that master's calls carry the error themselves
            elif not self.replication.enough(reply):
                # The master made these writes, its replicas did not confirm them in time: each
                # call answers that (the other masters' calls stand).
                shortfall = reply if isinstance(reply, Exception) else self.replication.timeout(reply)
                for i in covered:
                    replies[i] = shortfall
        return replies

    def _load_for(self, calls: Sequence[tuple[str, Sequence[str], Sequence[object]]], commands: list[Routed],
                  missing: list[int], replies: list[Any], each_master: bool) -> list[int]:
        """Load the scripts the missing calls need and return the calls to send again. each_master
        (a cluster): when a master is down the load goes to each master a missing call needs, and
        the calls of a master that cannot take it get its error (they did not run)."""
        try:
            for name in {calls[i][0] for i in missing}:
                load(self._client, name)
            return missing
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            if not (each_master and is_cluster(self._client)):
                raise
        by_node: dict[str, list[int]] = {}
        for i in missing:
            by_node.setdefault(self._node_of(commands[i][0]).name, []).append(i)
        again: list[int] = []
        for indexes in by_node.values():
            node = self._node_of(commands[indexes[0]][0])
            try:
                for name in {calls[i][0] for i in indexes}:
                    load_on(self._client, name, node)
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
                for i in indexes:
                    replies[i] = exc
                continue
            again += indexes
        return sorted(again)

    def _node_of(self, key: str) -> Any:
        return self._client.nodes_manager.get_node_from_slot(key_slot(key.encode()))

    def _exchange_with_waits(self, commands: list[Routed], each_master: bool = False
                             ) -> tuple[list[Any], list[tuple[Any, list[int]]]]:
        """(the commands' replies, each WAIT's reply with the commands it covers): when
        replication is on, one WAIT behind the commands of each node, routed by one of their keys
        (a node's commands go down one connection, and WAIT covers every write its connection
        made)."""
        wait = self.replication.commands()
        if not wait or not commands:
            return exchange_routed(self._client, commands, each_master=each_master), []
        by_node: dict[object, list[int]] = {}
        for i, (key, _) in enumerate(commands):
            node = self._node_of(key).name if is_cluster(self._client) else None
            by_node.setdefault(node, []).append(i)
        covers = [indexes for indexes in by_node.values() for _ in wait]
        waits = [(commands[indexes[0]][0], command) for indexes in by_node.values() for command in wait]
        replies = exchange_routed(self._client, [*commands, *waits], each_master=each_master)
        return replies[:len(commands)], list(zip(replies[len(commands):], covers, strict=True))

    def sha(self, name: str) -> str:
        """The SHA1 of a script (to load it after NOSCRIPT, or to name it in a trace)."""
        return str(self._fns[name].sha)

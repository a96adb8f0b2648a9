"""Lua scripts, read once at import and registered once per client (EVALSHA, reload on NOSCRIPT).

A line `-- #include NAME` inlines includes/NAME.lua, so shared helpers live in one file.
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

from ..replication import NO_WAIT, Replication
from ..wire import exchange_pooled, pack

_INCLUDE = re.compile(r"^-- #include (\w+)$", re.MULTILINE)
_ROOT = files(__package__)


def _expand(source: str) -> str:
    return _INCLUDE.sub(lambda m: (_ROOT / "includes" / f"{m.group(1)}.lua").read_text(), source)


def _split(filename: str) -> tuple[str, int]:
    name, _, n = filename.removesuffix(".lua").rpartition("-")
    return name, int(n)


_FILES = sorted(p.name for p in _ROOT.iterdir() if p.name.endswith(".lua"))
SOURCES: dict[str, str] = {_split(f)[0]: _expand((_ROOT / f).read_text()) for f in _FILES}
#: Each script's number of KEYS, from the `-N` suffix of its file name.
NUMKEYS: dict[str, int] = dict(_split(f) for f in _FILES)


class ScriptKeyCountError(TypeError):
    """A script was called with another number of keys than its file name declares."""


def check_keys(name: str, keys: Sequence[str]) -> None:
    """Raise unless `keys` has exactly as many keys as script `name` declares."""
    if len(keys) != NUMKEYS[name]:
        raise ScriptKeyCountError(f"script {name}-{NUMKEYS[name]} takes {NUMKEYS[name]} keys, got {len(keys)}")


class Scripts:
    """Named scripts bound to one client (sync or asyncio; redis-py picks the right Script).

    replication: what call_direct's writes wait for (DTQ_REDIS_MIN_REPLICAS; replication.py).
    """

    def __init__(self, client: Any, replication: Replication = NO_WAIT) -> None:
        self._client = client
        self.replication = replication
        self._fns = {name: client.register_script(src) for name, src in SOURCES.items()}

    def __call__(self, name: str, *, keys: list[str], args: list[object], client: Any = None) -> Any:
        check_keys(name, keys)
        return self._fns[name](keys=keys, args=args, client=client)

    def command(self, name: str, *, keys: Sequence[str], args: Sequence[object]) -> bytes:
        """One EVALSHA packed by hiredis, for callers that pipeline their own commands (the
        caller handles NOSCRIPT, e.g. by loading the script and sending again)."""
        check_keys(name, keys)
        return pack(["EVALSHA", self._fns[name].sha, len(keys), *keys, *args])

    def call_direct(self, name: str, *, keys: list[str], args: list[object]) -> Any:
        """EVALSHA packed by hiredis and sent on a pooled connection (blocking clients only): the
        same call as __call__ without redis-py's per-command wrappers, for acknowledged writes
        (submit, an operator action's outcome). With DTQ_REDIS_MIN_REPLICAS, the WAIT rides in
        the same exchange, and too few replicas raise ReplicationTimeout once the write is made."""
        commands = [self.command(name, keys=keys, args=args), *self.replication.commands()]
        reply, *acked = exchange_pooled(self._client.connection_pool, commands)
        if isinstance(reply, redis.exceptions.NoScriptError):
            self._client.script_load(SOURCES[name])  # Redis restarted or SCRIPT FLUSH: it did not run
            reply, *acked = exchange_pooled(self._client.connection_pool, commands)
        if isinstance(reply, Exception):
            raise reply
        self.replication.split([reply, *acked])
        return reply

    def sha(self, name: str) -> str:
        """The SHA1 of a script (to load it after NOSCRIPT, or to name it in a trace)."""
        return str(self._fns[name].sha)

"""Lua scripts, read once at import and registered once per client (EVALSHA, reload on NOSCRIPT).

A line `-- #include NAME` inlines includes/NAME.lua, so shared helpers live in one file.
"""

from __future__ import annotations

import re
from importlib.resources import files
from typing import Any

import redis

from ..wire import exchange_pooled, pack

_INCLUDE = re.compile(r"^-- #include (\w+)$", re.MULTILINE)
_ROOT = files(__package__)


def _expand(source: str) -> str:
    return _INCLUDE.sub(lambda m: (_ROOT / "includes" / f"{m.group(1)}.lua").read_text(), source)


SOURCES: dict[str, str] = {
    p.name.removesuffix(".lua").rpartition("-")[0]: _expand(p.read_text())
    for p in _ROOT.iterdir()
    if p.name.endswith(".lua")
}


class Scripts:
    """Named scripts bound to one client (sync or asyncio; redis-py picks the right Script)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._fns = {name: client.register_script(src) for name, src in SOURCES.items()}

    def __call__(self, name: str, *, keys: list[str], args: list[object], client: Any = None) -> Any:
        return self._fns[name](keys=keys, args=args, client=client)

    def call_direct(self, name: str, *, keys: list[str], args: list[object]) -> Any:
        """EVALSHA packed by hiredis and sent on a pooled connection (blocking clients only): the
        same call as __call__ without redis-py's per-command wrappers, for the submit path."""
        command = pack(["EVALSHA", self._fns[name].sha, len(keys), *keys, *args])
        (reply,) = exchange_pooled(self._client.connection_pool, [command])
        if isinstance(reply, redis.exceptions.NoScriptError):
            self._client.script_load(SOURCES[name])  # Redis restarted or SCRIPT FLUSH: it did not run
            (reply,) = exchange_pooled(self._client.connection_pool, [command])
        if isinstance(reply, Exception):
            raise reply
        return reply

    def sha(self, name: str) -> str:
        """The SHA1 for EVALSHA (for callers that pack their own commands)."""
        return str(self._fns[name].sha)

"""The hot-path scripts as Redis functions (FUNCTION LOAD, FCALL): their includes load once.

An EVALSHA runs the whole expanded script on every call, so every call of a hot-path script
first re-created the ~80 helpers and tables of its includes (common, claim, limits, retain,
history): about 10 µs of Redis CPU a call, a third to a half of an empty fetch or completion
(docs/performance.md, issue 20 goal 4). A Redis function library runs its top level once, at
FUNCTION LOAD; a call runs only the function. So each hot-path script is also a library of
its own: the script's includes at the library's top level, its body as the function.

What that asks of the includes (tests/worker/test_function_library.py loads every library):
- Nothing may run at load but definitions: a library's top level has no `redis`, `math`,
  `string`, `ipairs`... (Redis 7.0 gives the loader none of them). Constants are literals, and
  `local rcall = redis.call` becomes `local rcall`, set as each call begins.
- KEYS and ARGV are the function's arguments: the library declares them as locals at its top,
  and each call sets them, so the helpers read them as in a script.
- A variable of an include outlives a call: call_begin (includes/common.lua) sets the per-call
  ones back; per-call marks live on the call's own tables (K, ctx). Two caches use this on
  purpose: a partition's key names and the parsed retention argument (bounded; an EVALSHA
  script, which starts from nothing on every call, does not fill them).

The library's name, and its function's, carry a hash of its source: two dtq versions on one
Redis (a rolling deploy) call their own code. A node that lacks the function (restarted without
persistence, a new replica, FUNCTION FLUSH) answers "Function not found" and the caller loads
the library and sends the call again, as for NOSCRIPT.

A Redis that refuses functions (an ACL user without FUNCTION or FCALL, a managed Redis that
blocks them) is told once, in the log, and its client goes on with EVALSHA as before: the calls
cost more Redis CPU a call again (bench/bench_script_cost.py), nothing else changes.
"""

from __future__ import annotations

import hashlib
import logging
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

logger = logging.getLogger("dtq")

#: The scripts called as Redis functions (the packed calls of Scripts.command). Every other
#: script, and every call through redis-py's Script objects, stays an EVALSHA.
FUNCTION_SCRIPTS = frozenset({"enqueueTask", "enqueueTasks", "fetchTasks", "completeTasks"})

_LAST_INCLUDE = re.compile(r"^-- #include \w+$", re.MULTILINE)
_RCALL = "local rcall = redis.call\n"


@dataclass(frozen=True, slots=True)
class Library:
    """One script as a function library: its FUNCTION LOAD source and its function's name."""

    function: str
    source: str


def build(name: str, raw: str, expand: Callable[[str], str]) -> Library:
    """The library of script `name` from its file's text (raw: `-- #include` lines not expanded
    yet; expand inlines them)."""
    includes_end = max((m.end() for m in _LAST_INCLUDE.finditer(raw)), default=0)
    if not includes_end:
        raise ValueError(f"script {name} has no includes: it gains nothing as a function")
    top = expand(raw[:includes_end])
    if top.count(_RCALL) != 1:
        raise ValueError(f"script {name}: expected one `{_RCALL.strip()}` in its includes")
    top = top.replace(_RCALL, "local rcall\nlocal KEYS, ARGV\n")
    body = expand(raw[includes_end:])
    digest = hashlib.sha1(f"{top}\n{body}".encode()).hexdigest()[:16]
    function = f"dtq_{name}_{digest}"
    source = (f"#!lua name={function}\n{top}\n"
              f"redis.register_function('{function}', function(keys, args)\n"
              "KEYS, ARGV, rcall = keys, args, redis.call\n"
              "call_begin()\n"
              f"{body}\nend)\n")
    return Library(function, source)


def is_unknown(reply: object) -> bool:
    """Whether a reply says the node lacks the script or function, or may not call functions (the
    call did not run): the caller loads the script (load() tells a refusal) and sends it again."""
    if isinstance(reply, redis.exceptions.NoScriptError):
        return True
    if not isinstance(reply, redis.exceptions.ResponseError):
        return False
    text = str(reply)
    if isinstance(reply, redis.exceptions.NoPermissionError):  # NOPERM, its prefix parsed off
        return "'fcall'" in text
    return text.startswith("Function not found")


# Clients whose Redis refused FUNCTION LOAD: their hot-path calls are EVALSHAs (per client, as
# one process may talk to several Redis deployments).
_REFUSED: weakref.WeakSet[Any] = weakref.WeakSet()


def functions_refused(client: Any) -> bool:
    return client in _REFUSED


def refuse_functions(client: Any, exc: redis.exceptions.ResponseError) -> None:
    """FUNCTION LOAD failed: a refusal (no permission, an unknown command) makes this client use
    EVALSHA from now on; any other error (a library that does not load: a bug) is raised."""
    text = str(exc)
    lowered = text.lower()
    if not (isinstance(exc, redis.exceptions.NoPermissionError) or "unknown command" in lowered
            or "unknown subcommand" in lowered):
        raise exc
    if client not in _REFUSED:
        _REFUSED.add(client)
        logger.warning("Redis refuses FUNCTION LOAD (%s): the hot-path scripts are sent with EVALSHA "
                       "instead, at more Redis CPU a call (docs/deployment.md, Redis ACLs)", text)

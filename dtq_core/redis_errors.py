"""The one translator from redis-py's exceptions to what users read.

Every surface (the API's envelope and /ready, batch submit, the console's pages and JSON, the
CLI's one line and runworker_dtq) asks translate() or redis_trouble() and shows the result, so
the same trouble gives the same code, status and words everywhere:

- no answer (refused, timeout): REDIS_UNAVAILABLE; message "Redis is unavailable; try again
  shortly", state "Redis is unavailable"
- LOADING (restarted on existing data): REDIS_UNAVAILABLE; the same message, state "Redis is
  loading its dataset into memory"
- the URL's database does not exist: REDIS_UNAVAILABLE; WRONG_DATABASE both ways
- MISCONF (disk), OOM (maxmemory) or NOREPLICAS (min-replicas-to-write): REDIS_WRITE_FAILED;
  message "Redis refused the write; try again shortly (<Redis's reply>)", state "Redis refuses
  writes (<Redis's reply>)"
- READONLY (a write reached a master demoted by a failover): REDIS_UNAVAILABLE, as an outage; the
  connection is dropped, so the next call finds the new master
- CLUSTERDOWN, TRYAGAIN, or MOVED / ASK past routing's redirects (a Redis Cluster failing over or
  resharding), and redis-py's ClusterError after its own: REDIS_UNAVAILABLE, as an outage
- fewer replicas than DTQ_REDIS_MIN_REPLICAS confirmed a write (replication.py raises it):
  REDIS_REPLICATION_TIMEOUT
- the URL's user or password is refused (WRONGPASS, NOAUTH): REDIS_UNAVAILABLE; message and state
  "Redis refused dtq's credentials (authentication failed) ..." (a configuration error, not an outage)
- the Redis ACL denies dtq's user a command it needs (NOPERM): REDIS_UNAVAILABLE; message and
  state "Redis's ACL denies dtq's user the EVALSHA command ..."

All with HTTP status 503. Anything else (a WRONGTYPE, a script's own error) is not Redis
trouble: translate() says None and the caller lets it propagate. The CLI's line is one_line().
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from .connection import UNAVAILABLE_ERRORS, WRONG_DATABASE, demoted, refusal, write_refused, wrong_database
from .errors import RedisTrouble, RedisUnavailable, RedisWriteRefused
from .routing import not_run_here

UNREACHABLE, LOADING, WRONG_DB, WRITE_REFUSED = "unreachable", "loading", "wrong_database", "write_refused"
REPLICATION = "replication"  # too few replicas confirmed a write (replication.py)
AUTH_FAILED, NO_PERMISSION = "auth_failed", "no_permission"  # DTQ_REDIS_URL's user: a configuration error
KINDS = (UNREACHABLE, LOADING, WRONG_DB, WRITE_REFUSED, REPLICATION, AUTH_FAILED, NO_PERMISSION)

UNAVAILABLE = "Redis is unavailable"
RETRY = "try again shortly"
LOADING_STATE = "Redis is loading its dataset into memory"
CREDENTIALS_REFUSED = "Redis refused dtq's credentials (authentication failed)"
FIX_CREDENTIALS = "check the user and password in DTQ_REDIS_URL"
# AuthenticationError is a ConnectionError in redis-py: tested before the outage kinds, or a
# wrong password would read "cannot reach Redis" and send the operator after the network.
CREDENTIAL_ERRORS = (redis.exceptions.AuthenticationError, redis.exceptions.AuthenticationWrongNumberOfArgsError)
# A command the ACL denies inside a script is a plain error ("ERR The user executing the script
# can't run this command or subcommand"), not NOPERM.
SCRIPT_DENIED = "The user executing the script can't run this command"


def translate(exc: BaseException) -> RedisTrouble | None:
    """The dtq error for a Redis failure, or None when exc is not Redis trouble."""
    if isinstance(exc, RedisTrouble):
        return exc
    denied = access_denied(exc)
    if denied is not None:
        return denied
    if isinstance(exc, redis.exceptions.BusyLoadingError):  # restarted on existing data: transient
        return RedisUnavailable(f"{UNAVAILABLE}; {RETRY}", kind=LOADING, state=LOADING_STATE, cause=str(exc))
    # A demoted master, a cluster that marks a master failed (CLUSTERDOWN) or is moving slots
    # (TRYAGAIN, MOVED or ASK past the redirects): a failover or resharding under way, nothing run.
    # redis-py's own cluster client ends its MOVED / ASK / TRYAGAIN retries with ClusterError("TTL
    # exhausted."): a slot still migrating (dtq's scripts wait it out, scripts/__init__.py).
    if isinstance(exc, (*UNAVAILABLE_ERRORS, redis.exceptions.ClusterError)) or demoted(exc) or not_run_here(exc):
        return RedisUnavailable(f"{UNAVAILABLE}; {RETRY}", kind=UNREACHABLE, state=UNAVAILABLE, cause=str(exc))
    if write_refused(exc):
        # Not a bad request and not our bug: the client should retry once the operator frees disk
        # or memory. Redis's own words say which ("...No space left on device").
        reply = refusal(exc)
        return RedisWriteRefused(f"Redis refused the write; {RETRY} ({reply})", kind=WRITE_REFUSED,
                                 state=f"Redis refuses writes ({reply})", cause=reply)
    if wrong_database(exc):  # a configuration error, found only on connect
        return RedisUnavailable(WRONG_DATABASE, kind=WRONG_DB, cause=str(exc))
    return None


def access_denied(exc: BaseException) -> RedisUnavailable | None:
    """The trouble for Redis refusing DTQ_REDIS_URL's user: its credentials, or (NOPERM) a command
    its ACL does not grant; None for anything else. Not transient: no "try again shortly"."""
    if isinstance(exc, CREDENTIAL_ERRORS):
        return RedisUnavailable(f"{CREDENTIALS_REFUSED}; {FIX_CREDENTIALS}", kind=AUTH_FAILED,
                                state=CREDENTIALS_REFUSED, cause=str(exc))
    if isinstance(exc, redis.exceptions.NoPermissionError) or (
            isinstance(exc, redis.exceptions.ResponseError) and SCRIPT_DENIED in str(exc)):
        state = f"Redis's ACL denies dtq's user {denied_command(exc)}"
        return RedisUnavailable(f"{state}; grant it to the user in DTQ_REDIS_URL", kind=NO_PERMISSION,
                                state=state, cause=refusal(exc))
    return None


def denied_command(exc: BaseException) -> str:
    """Which command the ACL denied, from Redis's reply ("User <name> has no permissions to run the
    'evalsha' command"); the user's name stays out of what API clients read."""
    named = re.search(r"run the '([^']+)' command", str(exc))
    return f"the {named.group(1).upper()} command" if named else "a command or key dtq uses"


@contextmanager
def redis_trouble() -> Iterator[None]:
    """Raise Redis trouble in the block as RedisUnavailable / RedisWriteRefused; the rest as is."""
    try:
        yield
    except Exception as exc:
        trouble = translate(exc)
        if trouble is None or trouble is exc:
            raise
        raise trouble from exc


def one_line(trouble: RedisTrouble, where: str) -> str:
    """The CLI's line for it; where is the Redis URL with its password redacted."""
    if trouble.kind in (UNREACHABLE, LOADING):
        return f"cannot reach Redis at {where}: {trouble.cause}"
    if trouble.kind == AUTH_FAILED:
        return f"{CREDENTIALS_REFUSED} at {where}: {trouble.cause}; {FIX_CREDENTIALS}"
    return f"{trouble.state}: {where}"

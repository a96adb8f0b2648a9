"""DTQ_REDIS_URL, parsed: one Redis (redis://, rediss://, unix://), a master found through
Sentinel (redis+sentinel://, rediss+sentinel://) or a Redis Cluster (redis+cluster://,
rediss+cluster://). Pure parsing: config.py validates with it, connection.py builds clients
from it. See docs/deployment.md, "Redis topologies".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import unquote, urlparse

Topology = Literal["single", "sentinel", "cluster"]

SENTINEL_PORT = 26379  # Sentinel's own default port
CLUSTER_PORT = 6379
SINGLE_SCHEMES = ("redis", "rediss", "unix")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
# A Sentinel master name as sentinel.conf accepts it in practice (no spaces, no slash).
SERVICE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}")
_HOST_PORT_RE = re.compile(r"(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:\[\]]+))(?::(?P<port>[^:]*))?")


class RedisUrlError(ValueError):
    """DTQ_REDIS_URL cannot be used; the message is the one line a user reads."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RedisTarget:
    """Where dtq's Redis is. For "single", redis-py reads `url` itself (Redis.from_url)."""

    topology: Topology
    url: str = field(repr=False)  # it may carry the password
    nodes: tuple[tuple[str, int], ...] = ()  # the sentinels, or the cluster's seed nodes
    service_name: str = ""  # Sentinel's name for the master (sentinel monitor <name> ...)
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ssl: bool = False


def topology_of(url: str) -> Topology:
    """Which kind of deployment a (valid) DTQ_REDIS_URL names."""
    scheme = url.partition("://")[0].lower()
    if scheme in SENTINEL_SCHEMES:
        return "sentinel"
    if scheme in CLUSTER_SCHEMES:
        return "cluster"
    return "single"


def parse(url: str) -> RedisTarget:
    """Check a DTQ_REDIS_URL and say what it names; raise RedisUrlError with one clear line."""
    if not isinstance(url, str):
        raise RedisUrlError(f"DTQ_REDIS_URL must be a string (got {url!r})")
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme in SENTINEL_SCHEMES or scheme in CLUSTER_SCHEMES:
        return _parse_many(url, scheme)
    _check_single(url)
    return RedisTarget(topology="single", url=url)


def _check_single(url: str) -> None:
    parsed = urlparse(url)
    if parsed.scheme not in SINGLE_SCHEMES or (parsed.scheme != "unix" and not parsed.hostname):
        raise RedisUrlError(
            "DTQ_REDIS_URL is not a redis://, rediss://, unix://, redis+sentinel:// or redis+cluster:// URL "
            f"(got {redacted(url)!r})")
    try:
        parsed.port  # noqa: B018 - raises ValueError for a non-numeric port
    except ValueError:
        raise RedisUrlError(f"DTQ_REDIS_URL has an invalid port (got {redacted(url)!r})") from None
    if parsed.scheme != "unix" and "db=" not in parsed.query and not re.fullmatch(r"/?[0-9]{0,9}/?", parsed.path):
        # redis-py would quietly use database 0 for "redis://host/abc".
        raise RedisUrlError("DTQ_REDIS_URL's path must be a database number, as in redis://host:6379/0 "
                            f"(got {redacted(url)!r})")


def _parse_many(url: str, scheme: str) -> RedisTarget:
    """redis+sentinel://[[user]:password@]host:port[,host:port...]/<service>[/<db>] and
    redis+cluster://[[user]:password@]host:port[,host:port...][/0] (urlparse reads one host only)."""
    sentinel = scheme in SENTINEL_SCHEMES
    shown = redacted(url)
    rest = url.split("://", 1)[1]
    if "?" in rest or "#" in rest:
        raise RedisUrlError(f"DTQ_REDIS_URL ({scheme}://) takes no query string or fragment (got {shown!r})")
    netloc, slash, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    kind = "sentinel" if sentinel else "cluster seed node"
    nodes = tuple(_host_port(part, SENTINEL_PORT if sentinel else CLUSTER_PORT, kind, shown)
                  for part in hosts.split(",")) if hosts else ()
    if not nodes:
        example = "redis+sentinel://host:26379,host:26380/mymaster" if sentinel else \
            "redis+cluster://host:7000,host:7001"
        raise RedisUrlError(f"DTQ_REDIS_URL names no {kind}: list them as host:port[,host:port...], as in "
                            f"{example} (got {shown!r})")
    parts = path.split("/") if slash else []
    if parts and parts[-1] == "":
        parts.pop()  # a trailing slash
    if sentinel:
        if not parts or not SERVICE_NAME_RE.fullmatch(parts[0]):
            raise RedisUrlError("DTQ_REDIS_URL must name the Sentinel service (the master's name in sentinel.conf) "
                                f"after the sentinels, as in redis+sentinel://host:26379/mymaster (got {shown!r})")
        service, db_parts = parts[0], parts[1:]
    else:
        service, db_parts = "", parts
    if len(db_parts) > 1 or (db_parts and not re.fullmatch(r"[0-9]{1,9}", db_parts[0])):
        form = "/<service>/<db>" if sentinel else "/0 or nothing"
        raise RedisUrlError(f"DTQ_REDIS_URL's path must be {form}, the database a number (got {shown!r})")
    db = int(db_parts[0]) if db_parts else 0
    if not sentinel and db != 0:
        raise RedisUrlError(f"DTQ_REDIS_URL names database {db}, but a Redis Cluster has only database 0: "
                            f"drop the /{db} (got {shown!r})")
    return RedisTarget(topology="sentinel" if sentinel else "cluster", url=url, nodes=nodes, service_name=service,
                       db=db, username=username, password=password, ssl=scheme.startswith("rediss"))


def _host_port(part: str, default_port: int, kind: str, shown: str) -> tuple[str, int]:
    match = _HOST_PORT_RE.fullmatch(part.strip())
    if match is None:
        raise RedisUrlError(f"DTQ_REDIS_URL has an invalid {kind} address {part!r}: want host:port (got {shown!r})")
    host = match["ipv6"] or match["host"]
    raw_port = match["port"]
    if raw_port is None:
        return host, default_port
    if not raw_port.isascii() or not raw_port.isdigit() or not 0 < int(raw_port) < 65536:
        raise RedisUrlError(f"DTQ_REDIS_URL has an invalid port in {part!r}: want 1-65535 (got {shown!r})")
    return host, int(raw_port)


def redacted(url: str) -> str:
    """The URL without its passwords, for logs and messages (any scheme, any number of hosts): the
    one in user:password@ and the value of any query parameter named like a password (password=,
    sentinel_password=, ssl_password=...), which redis-py reads as well."""
    return _mask_query(_mask_userinfo(url))


def _mask_userinfo(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    # The authority ends at the first "/", "?" or "#" (a query may hold an "@" of its own).
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    netloc, tail = rest[:end], rest[end:]
    userinfo, at, hosts = netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.partition(":")[0]
    return f"{scheme}://{user}:***@{hosts}{tail}"


def _mask_query(url: str) -> str:
    head, question, rest = url.partition("?")
    if not question:
        return url
    query, hash_sign, fragment = rest.partition("#")
    params = [_mask_param(param) for param in query.split("&")]
    return f"{head}?{'&'.join(params)}{hash_sign}{fragment}"


def _mask_param(param: str) -> str:
    name, equals, value = param.partition("=")
    # Names are matched decoded and in any case: redis-py would read "Pass%77ord" as well.
    if equals and value and "password" in unquote(name).lower():
        return f"{name}=***"
    return param

"""Run a manage.py command while counting its Redis round trips at the client.

    python -m bench.rtcount OUT.json runworker_dtq --burst ...

Every `send_packed_command` of redis-py's asyncio connection is one round trip (a pipeline
sends all its commands in one write and reads the replies back to back), so counting them,
keyed by the first command of the write (EVALSHA keyed by script name), gives round trips per
task without relying on the server, whose command stats also count the commands scripts run.
At exit the counts, the process's peak RSS (VmHWM) and its CPU time since its first fetch
(start-up excluded) are written to OUT.json.
"""

from __future__ import annotations

import atexit
import collections
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

COUNTS: collections.Counter[str] = collections.Counter()
CPU_AT_FIRST_FETCH: list[float] = []  # process CPU seconds when the first fetch went out


def _label(command: Any, shas: dict[bytes, str]) -> str:
    first = command[0] if isinstance(command, (list, tuple)) and command else command
    if isinstance(first, str):
        first = first.encode()
    parts = bytes(first[:200]).split(b"\r\n")
    name = parts[2].upper() if len(parts) > 2 else b"?"
    if name == b"EVALSHA" and len(parts) > 4:
        return "EVALSHA " + shas.get(parts[4], parts[4][:8].decode())
    if name == b"FCALL" and len(parts) > 4:  # dtq_<script>_<hash> (dtq_core/scripts/library.py)
        return "FCALL " + parts[4].decode(errors="replace").split("_")[1 if parts[4].startswith(b"dtq_") else 0]
    return name.decode(errors="replace")


def install() -> None:
    import redis.asyncio.connection as conn

    from dtq_core.scripts import SOURCES

    shas = {hashlib.sha1(src.encode()).hexdigest().encode(): name for name, src in SOURCES.items()}
    original = conn.AbstractConnection.send_packed_command

    async def counted(self: Any, command: Any, check_health: bool = True) -> None:
        label = _label(command, shas)
        COUNTS[label] += 1
        if not CPU_AT_FIRST_FETCH and label in ("EVALSHA fetchTasks", "FCALL fetchTasks"):
            CPU_AT_FIRST_FETCH.append(_cpu_s())
        await original(self, command, check_health)

    conn.AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]


def _cpu_s() -> float:
    times = os.times()
    return times.user + times.system


def _peak_rss_kb() -> int | None:
    try:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return None


def main() -> None:
    out = Path(sys.argv[1])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dtq_site.settings")

    def dump() -> None:
        busy = _cpu_s() - CPU_AT_FIRST_FETCH[0] if CPU_AT_FIRST_FETCH else None
        out.write_text(json.dumps({"round_trips": dict(COUNTS), "peak_rss_kb": _peak_rss_kb(), "cpu_s": busy}))

    atexit.register(dump)
    install()
    from django.core.management import execute_from_command_line

    execute_from_command_line(["manage.py", *sys.argv[2:]])


if __name__ == "__main__":
    main()

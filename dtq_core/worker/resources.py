"""What a worker reports of its process with each heartbeat (the console's worker page): resident
memory and CPU time, and the CPU share since the previous heartbeat. Standard library only."""

from __future__ import annotations

import os
import resource
import time

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """Resident memory now (Linux: /proc/self/statm); elsewhere the peak (getrusage)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class CpuMeter:
    """The process's CPU time (every thread) and its share of one core since the last reading."""

    def __init__(self) -> None:
        self._cpu, self._wall = time.process_time(), time.monotonic()

    def read(self) -> tuple[float, float]:
        cpu, wall = time.process_time(), time.monotonic()
        share = (cpu - self._cpu) / (wall - self._wall) * 100 if wall > self._wall else 0.0
        self._cpu, self._wall = cpu, wall
        return cpu, share

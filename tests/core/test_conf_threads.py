"""The process-wide engine is built once even when handler threads ask for it at the same moment:
a second engine, dropped at once, would close its connections under the thread still using it
(seen as "Bad file descriptor" in a sync handler's first Redis call)."""

from __future__ import annotations

import threading
from typing import Any

from dtq_core import conf


def test_threads_asking_at_once_share_one_engine(dtq_settings: Any) -> None:
    conf._reload(setting="DTQ")
    barrier = threading.Barrier(8)
    seen: list[object] = []

    def ask() -> None:
        barrier.wait()
        seen.append(conf.get_engine())

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(seen) == 8 and len({id(e) for e in seen}) == 1

"""Where dtq's Django signals (dtq_core/signals.py) reach the engine and the worker, which do not
import Django themselves: importing dtq_core.signals (to connect a receiver) sets SIGNALS, and the
places that send check `SIGNALS is not None` and the signal's receivers first, so a process
where nobody listens pays one global read per task."""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("dtq.signals")

SIGNALS: Any = None  # the dtq_core.signals module, once imported


def send(name: str, **kwargs: Any) -> None:
    """Send signal `name` if it has receivers; a receiver that raises is logged, never raised."""
    signals = SIGNALS
    if signals is None:
        return
    signal = getattr(signals, name)
    if not signal.receivers:
        return
    for receiver, outcome in signal.send_robust(sender=None, **kwargs):
        if isinstance(outcome, Exception):
            logger.error("signal %s: receiver %s raised %s: %s", name, getattr(receiver, "__qualname__", receiver),
                         type(outcome).__name__, outcome)

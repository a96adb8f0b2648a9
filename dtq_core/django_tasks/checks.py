"""System checks for a DtqBackend in settings.TASKS (run by `manage.py check` and at startup).

IDs: dtq.E701 bad Redis URL, dtq.E702 a queue name dtq cannot use, dtq.E703 a bad option value,
dtq.W701 an unknown option. None of them touches the network: checks also run on build machines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.core import checks

from ..conf import get_config
from ..config import ConfigError
from ..task import valid_queue_name

if TYPE_CHECKING:
    from .backend import DtqBackend


def check_backend(backend: DtqBackend) -> list[checks.CheckMessage]:
    """Report what would make enqueueing on this backend fail."""
    where = f"TASKS[{backend.alias!r}]"
    messages: list[checks.CheckMessage] = []
    for check_id, message in backend.dtq_options.problems:
        kind = checks.Warning if ".W" in check_id else checks.Error
        messages.append(kind(f"{where}: {message}", id=check_id))
    if backend.dtq_options.redis_url is None:
        try:
            get_config()  # settings.DTQ, normally validated when settings load; not if built by hand
        except (ConfigError, TypeError, ValueError) as exc:
            messages.append(checks.Error(f"{where}: settings.DTQ is invalid: {exc}", id="dtq.E701"))
    for queue in sorted(backend.queues):
        if not valid_queue_name(queue):
            messages.append(checks.Error(
                f"{where}: queue {queue!r} in QUEUES is not a dtq queue name",
                hint="use [a-z0-9][a-z0-9_-]{0,63}; dlq and audit are reserved", id="dtq.E702",
            ))
    return messages

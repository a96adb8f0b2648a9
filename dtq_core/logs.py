"""Log formatting: JSON lines when DTQ_LOG_FORMAT=json, readable text otherwise.

Both carry the correlation fields task_id, queue, attempt, worker_id and request_id, found in
this order (first wins):
1. attributes passed with `logger.info(..., extra={"task_id": ...})`;
2. `key=value` pairs in the message, the convention dtq's own log lines follow: read only from
   dtq's own loggers ("dtq", "dtq.*"), whose messages dtq formats;
3. the task a handler is running (so handler authors' own log lines are correlated for free);
4. the HTTP request: the contextvar the middleware below sets, or the `request` that Django's
   django.request logger attaches.

Pairs in another logger's message are not read: a handler logging a payload ("note: %s") would
otherwise let whoever submitted it relabel the line as another task's, and a search by task_id
is how an operator follows one task.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from . import registry

FIELDS: tuple[str, ...] = ("task_id", "queue", "attempt", "worker_id", "request_id")
_PAIR = re.compile(r"(?<![\w.])(task_id|queue|attempt|worker_id|request_id)=([^\s,;]+)")
# Characters that end or hide a line in a terminal or a line-based log shipper: C0 controls, DEL,
# C1 controls (NEL among them) and the Unicode line and paragraph separators.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("dtq_log_request_id", default=None)


def is_dtq_logger(name: str) -> bool:
    """Whether a logger is one of dtq's own, whose messages carry trusted key=value pairs."""
    return name == "dtq" or name.startswith("dtq.")


def correlation(record: logging.LogRecord) -> dict[str, Any]:
    """Return the correlation fields known for a record (missing ones are absent)."""
    found: dict[str, Any] = {}
    for name in FIELDS:
        value = getattr(record, name, None)
        if value not in (None, ""):
            found[name] = value
    if is_dtq_logger(record.name):
        for name, value in _PAIR.findall(record.getMessage()):
            found.setdefault(name, value)
    ctx = registry.current_task()
    if ctx is not None:
        for name in ("task_id", "queue", "attempt", "worker_id"):
            found.setdefault(name, getattr(ctx, name))
    if "request_id" not in found:
        request_id = _request_id.get() or getattr(getattr(record, "request", None), "request_id", None)
        if request_id:
            found["request_id"] = request_id
    if "attempt" in found:
        try:
            found["attempt"] = int(found["attempt"])
        except (TypeError, ValueError):
            pass
    return found


def _timestamp(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    """One JSON object per line, with every correlation field present (null when unknown)."""

    def format(self, record: logging.LogRecord) -> str:
        fields = correlation(record)
        line: dict[str, Any] = {"ts": _timestamp(record), "level": record.levelname, "logger": record.name,
                                "message": record.getMessage()}
        line.update({name: fields.get(name) for name in FIELDS})
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def escape_controls(text: str) -> str:
    """Escape control characters (newlines first of all) as Python would in a repr: \\n, \\x1b."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class TextFormatter(logging.Formatter):
    """`<time> <level> <logger> <message>` plus the correlation fields the message lacks.

    Only a dtq logger's message is taken to hold its own fields; any other logger's line gets
    every field appended, so text a handler logged cannot stand in for them.

    One record is one line: control characters in the message (a handler's error text, a task
    type, anything a user sent) are escaped, so nobody can forge log lines through them. A
    traceback (exc_info) still follows on lines of its own, as Python prints it.
    """

    def __init__(self, fmt: str | None = None, datefmt: str | None = None, style: Any = "%", **kwargs: Any) -> None:
        super().__init__(fmt or "%(asctime)s %(levelname)s %(name)s %(message)s", datefmt, style, **kwargs)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        text = super().formatMessage(record)
        message = record.getMessage()
        trusted = message if is_dtq_logger(record.name) else ""
        extra = [f"{k}={v}" for k, v in correlation(record).items() if f"{k}=" not in trusted]
        return escape_controls(f"{text} {' '.join(extra)}" if extra else text)


class RequestLogContextMiddleware:
    """Expose the request's X-Request-ID to every log line written while it is served."""

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        token = _request_id.set(getattr(request, "request_id", None))
        try:
            return self.get_response(request)
        finally:
            _request_id.reset(token)

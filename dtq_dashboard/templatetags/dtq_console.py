"""Template filters for the console: relative times with the exact time on hover, badges, numbers."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()


def _parse(value: Any) -> datetime | None:
    if not value or not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def relative(seconds: float) -> str:
    """Say how long ago (or how far ahead) a moment is, the way people read a clock at 3 a.m."""
    ahead = seconds < 0
    s = abs(seconds)
    if s < 5:
        return "just now"
    if s < 60:
        text = f"{int(s)}s"
    elif s < 3600:
        text = f"{int(s // 60)} min"
    elif s < 86400:
        text = f"{int(s // 3600)} h {int(s % 3600 // 60)} min" if s < 36000 else f"{int(s // 3600)} h"
    else:
        text = f"{int(s // 86400)} d"
    return f"in {text}" if ahead else f"{text} ago"


@register.filter
def when(value: Any) -> SafeString | str:
    """Render an ISO time as <time> with relative text; the exact UTC time is the hover title."""
    moment = _parse(value)
    if moment is None:
        return "—"
    exact = moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"
    age = (datetime.now(UTC) - moment).total_seconds()
    return format_html('<time datetime="{}" title="{}" class="rel">{}</time>', value, exact, relative(age))


@register.filter
def status_badge(status: Any) -> SafeString:
    name = str(status or "UNKNOWN")
    css = name.lower().replace("_", "-") if name.replace("_", "").isalpha() else "unknown"
    return format_html('<span class="badge st-{}" data-status="{}">{}</span>', css, name, name)


@register.filter
def num(value: Any) -> str:
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return "—" if value in (None, "") else str(value)


@register.filter
def ms(value: Any) -> str:
    """A duration in ms as the charts write it ("850 ms", "1.2 s"); "—" without a value."""
    from ..charts import fmt

    try:
        return fmt(float(value), "ms")
    except (TypeError, ValueError):
        return "—"


@register.filter
def pct(value: Any) -> str:
    """A fraction (0-1) as a percentage with one decimal; "—" without a value."""
    try:
        return f"{float(value) * 100:.1f} %"
    except (TypeError, ValueError):
        return "—"


@register.filter
def seconds(value: Any) -> str:
    """Heartbeat ages and due-in values: '1.2s', '3 min'."""
    try:
        s = float(value)
    except (TypeError, ValueError):
        return "—"
    if abs(s) < 60:
        return f"{s:.1f}s"
    return relative(-s).removeprefix("in ") if s >= 0 else relative(-s)


@register.simple_tag
def query_with(query: str, **params: Any) -> str:
    """Append params to an already-encoded query string (for paging links that keep filters)."""
    from django.utils.http import urlencode

    extra = urlencode({k: v for k, v in params.items() if v not in (None, "")})
    return "&".join(part for part in (query, extra) if part)


@register.filter
def task_url(task_id: Any) -> str:
    """Link to a task page; tolerant of records with a missing id (a broken hash must not 500 a page)."""
    from urllib.parse import quote

    return f"{task_base()}{quote(str(task_id), safe='')}/" if task_id else "#"


@register.filter
def queue_url(name: Any) -> str:
    from urllib.parse import quote

    return f"{queue_base()}{quote(str(name), safe='')}/" if name else "#"


@register.filter
def worker_url(worker_id: Any) -> str:
    """Link to a worker page; its quiet and stop actions are this URL + "quiet" / "stop".

    A worker's name is the operator's (runworker_dtq --name), "k8s/pod-1" for one: its "/" is
    kept, since the URLs take the id as a path and some proxies refuse an encoded one (%2F).
    """
    from urllib.parse import quote

    return f"{_base('dtq_dashboard:worker')}{quote(str(worker_id), safe='/')}/" if worker_id else "#"


@register.filter
def periodic_url(name: Any) -> str:
    from urllib.parse import quote

    return f"{_base('dtq_dashboard:periodic-detail')}{quote(str(name), safe='')}/" if name else "#"


# Where the console is mounted is the project's choice (include() under any prefix): every URL
# the pages and live.js build comes from reverse(), never a hard-coded "/".
_PLACEHOLDER = "0"


def _base(name: str) -> str:
    """The URL of `name` without its last segment: the prefix a quoted id is appended to.

    Ids are appended quoted (a "/" in a task id becomes %2F), which reverse() itself would refuse.
    """
    from django.urls import reverse

    return reverse(name, args=[_PLACEHOLDER])[: -len(_PLACEHOLDER) - 1]


@register.simple_tag
def task_base() -> str:
    return _base("dtq_dashboard:task")


@register.simple_tag
def queue_base() -> str:
    return _base("dtq_dashboard:queue")


@register.simple_tag
def events_path() -> str:
    """The live feed's WebSocket path: under the console's prefix (dtq_dashboard.asgi routes it)."""
    from dtq_dashboard.routing import console_events_path

    return console_events_path()


@register.simple_tag
def api_url() -> str:
    """The API's task list when the project mounts dtq_api, else "" (the footer then omits the link)."""
    from django.urls import NoReverseMatch, resolve, reverse

    try:
        url = reverse("task-list")
    except NoReverseMatch:
        return ""
    from dtq_api.views import TaskListView  # only now: a console without the API needs no DRF

    # dtq_api's names have no namespace: "task-list" may be a view of the project's own.
    return url if getattr(resolve(url).func, "view_class", None) is TaskListView else ""

"""The console's history: charts on the overview and queue pages, the task types pages, and the
fragment live.js reloads when tasks move (thin views over engine.history)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import urlencode

from dtq_core.conf import get_engine
from dtq_core.errors import ValidationError
from dtq_core.history import RANGES

from . import charts
from .guards import console_page

VIEWS = ("overview", "queue", "type")


def range_of(request: HttpRequest) -> str:
    value = request.GET.get("range") or "1h"
    if value not in RANGES:
        raise ValidationError(f"range must be one of {', '.join(RANGES)}", field="range")
    return value


def history_context(range_: str, *, view: str, queue: str | None = None, ttype: str | None = None
                    ) -> dict[str, Any]:
    """What _partials/history.html draws for a page: its charts (SVG and data tables), and the
    fragment URL the page reloads them from."""
    stats = get_engine().history.stats(range_, queue=queue, ttype=ttype, types=False,
                                       depth=view == "queue")
    s, step, times, totals = stats["series"], stats["step_s"], stats["series"]["time"], stats["totals"]
    per = charts.per(step)
    outcome_rows = [(label, totals[key]) for key, label, _ in charts.OUTCOME_LAYERS]
    found: list[dict[str, Any]] = [{
        "title": f"Tasks finished per {per}, by outcome",
        "svg": charts.stacked_bars(f"Tasks finished per {per}, by outcome", times, step,
                                   charts.outcome_layers(s)),
        "legend": charts.OUTCOME_LAYERS, "rows": outcome_rows, "head": ("Outcome", f"Tasks ({range_})"),
    }]
    if view == "overview":
        failure_rows = [(label, totals[key]) for key, label, _ in charts.FAILURE_LAYERS]
        found.append({
            "title": f"Failures and retries per {per}",
            "svg": charts.stacked_bars(f"Failures and retries per {per}", times, step,
                                       charts.outcome_layers(s, charts.FAILURE_LAYERS)),
            "legend": charts.FAILURE_LAYERS, "rows": failure_rows + [("Error rate", _rate(totals["error_rate"]))],
            "head": ("Outcome", f"Tasks ({range_})"),
        })
    for key, title in (("wait_ms", "Wait time (ready to started)"), ("run_ms", "Run time")):
        if view == "overview" and key == "wait_ms":
            continue
        found.append({
            "title": f"{title}, percentiles",
            "svg": charts.lines(f"{title}, percentiles per {per}", times, step, charts.percentile_layers(s[key]), "ms"),
            "legend": charts.PERCENTILE_LAYERS,
            "rows": [(q, _ms(totals[key][q])) for q in ("p50", "p95", "p99")],
            "head": ("Percentile", f"Over {range_}"),
        })
    if view == "queue" and s.get("depth") is not None:
        present = [d for d in s["depth"] if d is not None]
        found.append({
            "title": "Waiting tasks",
            "svg": charts.lines(f"Waiting tasks per {per} (peak of the minute samples)", times, step,
                                [charts.Layer("Waiting", "c-depth", s["depth"])]),
            "legend": (("depth", "Waiting (peak)", "c-depth"),),
            "rows": [("Latest sample", present[-1] if present else "—"), ("Peak", max(present) if present else "—")],
            "head": ("", f"Over {range_}"),
        })
    params = {"range": range_, "view": view, **({"queue": queue} if queue else {}),
              **({"type": ttype} if ttype else {})}
    return {"range": range_, "ranges": list(RANGES), "charts": found, "totals": totals, "per": per,
            "empty": not any(totals[key] for key, _, _ in charts.OUTCOME_LAYERS),
            "fragment_url": f"{reverse('dtq_dashboard:history-fragment')}?{urlencode(params)}",
            "resolution": "1 minute" if stats["resolution_s"] == 60 else "1 hour"}


def _ms(value: float | None) -> str:
    return "—" if value is None else charts.fmt(value, "ms")


def _rate(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f} %"


@console_page
def fragment(request: HttpRequest) -> HttpResponse:
    """The history section alone: what the page swaps in when tasks move."""
    view = request.GET.get("view") or "overview"
    if view not in VIEWS:
        raise ValidationError("view must be overview, queue or type", field="view")
    context = history_context(range_of(request), view=view, queue=request.GET.get("queue") or None,
                              ttype=request.GET.get("type") or None)
    return render(request, "dtq_dashboard/_partials/history.html", {"h": context})


@console_page
def types(request: HttpRequest) -> HttpResponse:
    """Every task type over the range, the slowest (p95 run time) first, with its error rate."""
    from .views import _render

    range_ = range_of(request)
    queue = request.GET.get("queue") or None
    stats = get_engine().history.types(range_, queue=queue)
    rows = stats["types"]
    for row in rows:
        row["url"] = reverse("dtq_dashboard:type", args=[row["type"]]) + f"?range={range_}"
    return _render(request, "types.html", {"rows": rows, "range": range_, "ranges": list(RANGES), "queue": queue,
                                           "totals": stats["totals"]}, nav="types")


@console_page
def task_type(request: HttpRequest, name: str) -> HttpResponse:
    from .views import _render

    range_ = range_of(request)
    return _render(request, "type.html", {"name": name, "h": history_context(range_, view="type", ttype=name)},
                   nav="types")

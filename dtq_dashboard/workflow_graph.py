"""A workflow's steps as a server-rendered SVG graph: one column per depth (a step sits one column
right of its deepest predecessor), one box per step coloured by its status and linking to its task,
and an edge from every predecessor. No script and no library: the page draws it as it loads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

BOX_W, BOX_H = 176, 46
GAP_X, GAP_Y = 56, 14
PAD = 8
MAX_DRAWN = 200  # past this many steps the graph says so and the table lists them instead


@dataclass(frozen=True, slots=True)
class Box:
    index: int
    x: int
    y: int


def layout(steps: list[dict[str, Any]]) -> dict[int, Box]:
    """Each step's box: column by depth, rows in step order within a column."""
    depth: dict[int, int] = {}
    for step in steps:  # steps come in creation order: predecessors first
        deps = [depth[d] for d in step["depends_on"] if d in depth]
        depth[step["index"]] = 1 + max(deps) if deps else 0
    rows: dict[int, int] = {}
    boxes = {}
    for step in steps:
        column = depth[step["index"]]
        row = rows.get(column, 0)
        rows[column] = row + 1
        boxes[step["index"]] = Box(step["index"], PAD + column * (BOX_W + GAP_X), PAD + row * (BOX_H + GAP_Y))
    return boxes


def _css(status: str) -> str:
    return status.lower().replace("_", "-") if status.replace("_", "").isalpha() else "unknown"


def _edge(a: Box, b: Box) -> SafeString:
    x1, y1 = a.x + BOX_W, a.y + BOX_H // 2
    x2, y2 = b.x, b.y + BOX_H // 2
    mid = (x1 + x2) // 2
    return format_html('<path class="wf-edge" d="M{} {} C{} {} {} {} {} {}" marker-end="url(#wf-arrow)"/>',
                       x1, y1, mid, y1, mid, y2, x2 - 2, y2)


def _node(step: dict[str, Any], box: Box, task_url: Callable[[str], str]) -> SafeString:
    kind = step["type"] if len(step["type"]) <= 22 else step["type"][:21] + "…"
    # The name starts with the box's visible words (WCAG 2.5.3, label in name), then says the rest.
    full = "" if kind == step["type"] else f", type {step['type']}"
    label = f"{kind} #{step['index']} · {step['status']}{full}, on queue {step['queue']}"
    return format_html(
        '<a href="{}" class="wf-node st-{}" aria-label="{}"><title>{}</title>'
        '<rect x="{}" y="{}" width="{}" height="{}" rx="7"/>'
        '<text x="{}" y="{}" class="wf-type">{}</text><text x="{}" y="{}" class="wf-status">#{} · {}</text></a>',
        task_url(step["task_id"]), _css(step["status"]), label, label,
        box.x, box.y, BOX_W, BOX_H, box.x + 10, box.y + 19, kind, box.x + 10, box.y + 36, step["index"],
        step["status"])


def render(steps: list[dict[str, Any]], task_url: Callable[[str], str]) -> SafeString | None:
    """The graph as inline SVG, or None when the workflow has more steps than are worth drawing."""
    if not steps or len(steps) > MAX_DRAWN:
        return None
    boxes = layout(steps)
    width = max(b.x for b in boxes.values()) + BOX_W + PAD
    height = max(b.y for b in boxes.values()) + BOX_H + PAD
    edges = format_html_join("", "{}", ((_edge(boxes[d], boxes[s["index"]]),) for s in steps
                                        for d in s["depends_on"] if d in boxes))
    nodes = format_html_join("", "{}", ((_node(s, boxes[s["index"]], task_url),) for s in steps))
    arrow = mark_safe('<defs><marker id="wf-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
                      'markerHeight="7" orient="auto-start-reverse"><path d="M0 0 L10 5 L0 10 z"/></marker></defs>')
    return format_html('<svg class="wf-graph" role="group" aria-label="Workflow steps as a graph" width="{}" '
                       'height="{}" viewBox="0 0 {} {}" xmlns="http://www.w3.org/2000/svg">{}{}{}</svg>',
                       width, height, width, height, arrow, edges, nodes)

"""Background work of the receipts example: plain Django tasks, run by dtq workers."""

from __future__ import annotations

import asyncio
from typing import Any

try:  # Django >= 6.0
    from django.tasks import task
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import task

from dtq_tasks import RetryableError


@task(priority=10)  # > 0: dtq's high band, ahead of the default-priority work
def send_receipt(order_id: int, email: str) -> dict[str, Any]:
    """Render and send the receipt of one order (here: return what would be sent)."""
    return {"order_id": order_id, "to": email, "subject": f"Your receipt for order #{order_id}"}


@task(takes_context=True, queue_name="default")
def render_invoice_pdf(context: Any, order_id: int, fail_first: int = 0) -> dict[str, Any]:
    """Render the invoice; a transient failure raises RetryableError so dtq retries with backoff."""
    if context.attempt <= fail_first:
        raise RetryableError(f"renderer busy (attempt {context.attempt})")
    return {"order_id": order_id, "pdf": f"invoices/{order_id}.pdf", "attempt": context.attempt}


@task(priority=-10)  # < 0: dtq's low band, after everything else
async def notify_warehouse(order_id: int) -> str:
    """Tell the warehouse over HTTP (an async task: it runs on the worker's event loop)."""
    await asyncio.sleep(0)  # e.g. `async with httpx.AsyncClient() as c: await c.post(...)`
    return f"order {order_id} queued for packing"

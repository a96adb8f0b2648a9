"""The live feed under load (issue 24, item 8): 2,000 events a second for 5 seconds into an open
overview, in headless Chromium against daphne. The page keeps up (every event is shown or counted
as dropped by the server's backpressure, none silently lost), stays responsive (no frame held
for long, measured with the page's own performance timing), and the
feed stays bounded."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import redis

from dtq_core.engine import Engine
from tests.conftest import wait_for

from .conftest import log_in
from .server import ConsoleServer

RATE, SECONDS = 2000, 5

WATCH_FRAMES = """
window.__frames = {worst: 0, last: performance.now(), count: 0};
window.__longTasks = [];
new PerformanceObserver(list => list.getEntries().forEach(e => window.__longTasks.push(e.duration)))
  .observe({type: "longtask", buffered: false});
(function tick(now) {
  const f = window.__frames;
  f.worst = Math.max(f.worst, now - f.last); f.last = now; f.count += 1;
  requestAnimationFrame(tick);
})(performance.now());
"""


def _publish(client: redis.Redis, channel: str, stop_after: float) -> int:
    """RATE events a second (in batches every 10 ms) until stop_after seconds have passed."""
    sent, started = 0, time.monotonic()
    while (elapsed := time.monotonic() - started) < stop_after:
        due = int(elapsed * RATE) + RATE // 100
        pipe = client.pipeline(transaction=False)
        for i in range(sent, due):
            pipe.publish(channel, json.dumps({
                "event_id": f"{i}-load-{i}", "type": "task.succeeded", "task_id": f"load-{i}", "queue": "load",
                "status": "SUCCEEDED", "attempt": 1, "ts": "2026-12-05T12:00:00.000Z"}))
        pipe.execute()
        sent = due
        time.sleep(0.01)
    return sent


def test_the_feed_keeps_up_with_2000_events_a_second_without_freezing(
        page: Any, console: ConsoleServer, console_engine: Engine) -> None:
    log_in(page, console, "admin", "/")
    page.wait_for_function("document.body.dataset.feed === 'live'")
    page.evaluate(WATCH_FRAMES)
    sent: list[int] = []
    publisher = threading.Thread(target=lambda: sent.append(
        _publish(console_engine.client, console_engine.keys.events(), SECONDS)))
    publisher.start()
    # While the burst runs, the page answers a click at once (a range link's focus, in the page).
    time.sleep(SECONDS / 2)
    started = time.monotonic()
    page.evaluate("document.querySelector('.ranges a').focus()")
    responsive_s = time.monotonic() - started
    publisher.join()
    total = sent[0]
    assert total >= RATE * SECONDS * 0.9, total

    def accounted() -> bool:
        stats = page.evaluate("window.dtqFeed")
        return stats["received"] + stats["dropped"] >= total

    wait_for(accounted, timeout=20, interval=0.2, message=lambda: f"{page.evaluate('window.dtqFeed')} of {total}")
    stats = page.evaluate("window.dtqFeed")
    frames = page.evaluate("window.__frames")
    long_tasks = page.evaluate("window.__longTasks")
    rows = page.locator("#feed tbody tr").count()
    print(f"\nfeed load: {total} events in {SECONDS} s; received {stats['received']}, dropped {stats['dropped']}; "
          f"worst frame gap {frames['worst']:.0f} ms over {frames['count']} frames; long tasks {len(long_tasks)} "
          f"(longest {max(long_tasks, default=0):.0f} ms); a script call during the burst took "
          f"{responsive_s * 1000:.0f} ms")
    assert stats["received"] >= total * 0.5  # most shown; the rest counted as dropped by the server
    assert rows <= 200  # the feed stays bounded
    # Bounds loose enough for a loaded CI machine (docs/performance.md has an idle run's figures):
    # a page that froze under the feed would hold its frames and calls for the whole burst.
    assert frames["worst"] < 1500, frames
    assert responsive_s < SECONDS / 2

"""For worker processes of the Sentry test (DTQ_TASK_MODULES=tests.integrations.sentry_setup):
sentry_sdk initialised as a project would, its events caught by sentry-sdk's own transport hook (a
Transport whose capture_envelope appends each event as a JSON line to the file DTQ_TEST_SENTRY
names: nothing leaves the machine), a before_send that scrubs card numbers, and handlers that fail
permanently, once, or always."""

from __future__ import annotations

import json
import os
from typing import Any

import sentry_sdk
from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

import dtq_tasks


class FileTransport(Transport):
    def capture_envelope(self, envelope: Envelope) -> None:
        with open(os.environ["DTQ_TEST_SENTRY"], "a") as out:
            for item in envelope.items:
                if item.type == "event":
                    out.write(json.dumps(item.payload.json) + "\n")


def scrub(event: dict[str, Any], hint: dict[str, Any]) -> dict[str, Any]:
    task = event.get("contexts", {}).get("dtq task", {})
    if "4111" in str(task.get("payload")):
        task["payload"] = "[scrubbed]"
    return event


if os.environ.get("DTQ_TEST_SENTRY"):
    sentry_sdk.init(dsn="http://public@127.0.0.1:9/1", transport=FileTransport, before_send=scrub)


@dtq_tasks.task("sentry.permanent")
def permanent(payload: Any) -> Any:
    raise ValueError("bad input " + str(payload.get("order")))


@dtq_tasks.task("sentry.once")
async def once(payload: Any) -> Any:
    ctx = dtq_tasks.current_task()
    assert ctx is not None
    if ctx.attempt == 1:
        raise dtq_tasks.RetryableError("try again")
    return "ok"


@dtq_tasks.task("sentry.always")
def always(payload: Any) -> Any:
    raise dtq_tasks.RetryableError("still down")

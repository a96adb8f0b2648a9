"""GET /api/v1/dlq[/<entry>], POST /api/v1/dlq/<entry>/retry|discard and the bulk /dlq/retry|discard.

A dead letter's id is keys.dlq_ref: its partition's tag and its entry id in that partition's DLQ."""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

import pytest
import redis
from rest_framework.test import APIClient

import dtq_tasks
from dtq_core.engine import Engine
from dtq_core.keys import parse_dlq_ref

from ..conftest import wait_for
from .support import assert_error, drain, make_dead_letters


def post(api: APIClient, path: str, body: Any) -> Any:
    raw = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return api.post(path, raw, content_type="application/json")


def entry_of(engine: Engine, task_id: str) -> str:
    return engine.tasks.get(task_id)["dlq_entry_id"]


def newest_first(ids: list[str]) -> list[str]:
    """Dead-letter ids in the DLQ's order: newest entry id time first, then partition tag."""
    def key(ref: str) -> tuple[int, str, int]:
        parsed = parse_dlq_ref(ref)
        assert parsed is not None, ref
        ms, seq = parsed[1].split("-")
        return int(ms), parsed[0], int(seq)

    return sorted(ids, key=key, reverse=True)


def test_list_shows_dead_letters_newest_first_with_filters(api: APIClient, live_engine: Engine) -> None:
    mail = make_dead_letters(live_engine, 3, queue="mail", message="smtp refused")
    make_dead_letters(live_engine, 2, queue="sms", type="no.such.type")
    items = api.get("/api/v1/dlq").json()["results"]
    assert len(items) == 5 and [i["entry_id"] for i in items] == newest_first([i["entry_id"] for i in items])
    assert {i["task_id"] for i in api.get("/api/v1/dlq?queue=mail").json()["results"]} == set(mail)
    assert {i["type"] for i in api.get("/api/v1/dlq?type=no.such.type").json()["results"]} == {"no.such.type"}
    found = api.get("/api/v1/dlq?q=SMTP").json()["results"]
    assert len(found) == 3 and all("smtp refused" in i["error"] for i in found)
    assert api.get("/api/v1/dlq?queue=mail&type=no.such.type").json() == {"results": [], "next": None}


def test_list_pages_with_a_cursor(api: APIClient, live_engine: Engine) -> None:
    make_dead_letters(live_engine, 7)
    seen: list[str] = []
    url: str | None = "/api/v1/dlq?limit=3"
    while url:
        page = api.get(url).json()
        seen.extend(i["entry_id"] for i in page["results"])
        url = page["next"]
    assert len(seen) == 7 == len(set(seen))


@pytest.mark.parametrize("query", ["limit=0", "limit=9999", "cursor=abc", "cursor=1-2-3-4", "q=" + "x" * 201,
                                   "cursor=0-0", "cursor=1-0", "cursor=abc-0-0", "cursor=abc-99999999999999999999-0",
                                   "cursor=ABC-1-0"])
def test_list_refuses_bad_parameters(api: APIClient, query: str) -> None:
    assert_error(api.get(f"/api/v1/dlq?{query}"), 400, "VALIDATION_ERROR")


def test_one_entry_shows_its_task(api: APIClient, live_engine: Engine) -> None:
    [task_id] = make_dead_letters(live_engine, 1)
    entry_id = entry_of(live_engine, task_id)
    # The id names the partition (the task id's tag) and the entry in its DLQ stream.
    assert parse_dlq_ref(entry_id) is not None and entry_id.split("-")[0] == task_id.split("-")[0]
    entry = api.get(f"/api/v1/dlq/{entry_id}").json()
    assert entry["entry_id"] == entry_id and api.get("/api/v1/dlq").json()["results"][0]["entry_id"] == entry_id
    assert entry["task_id"] == task_id and entry["task"]["status"] == "DEAD_LETTERED"
    assert entry["error_class"] and entry["attempt"] == 1


@pytest.mark.parametrize("entry_id", ["abc-1-0", "1-0", "abc", "abc-99999999999999999999999-1",
                                      "abc-99999999999999999999-1", "ABC-1-0"])
def test_an_unknown_entry_is_404_for_every_action(api: APIClient, entry_id: str) -> None:
    assert_error(api.get(f"/api/v1/dlq/{entry_id}"), 404, "DLQ_ENTRY_NOT_FOUND")
    assert_error(api.post(f"/api/v1/dlq/{entry_id}/retry"), 404, "DLQ_ENTRY_NOT_FOUND")
    assert_error(api.post(f"/api/v1/dlq/{entry_id}/discard"), 404, "DLQ_ENTRY_NOT_FOUND")


def test_retry_requeues_the_same_task_with_a_fresh_attempt_budget(
        api: APIClient, live_engine: Engine, redis_client: redis.Redis) -> None:
    # An unknown type is permanent: one attempt, then the DLQ. The "fix" is deploying its handler.
    # Its ttl leaves the burst worker time to start on a loaded machine (0.5 s did not, on a
    # cluster in CI: the task expired unrun), and has passed before the retry below.
    [task_id] = make_dead_letters(live_engine, 1, type="tests.fixed_later", ttl_seconds=2)
    dead = live_engine.tasks.get(task_id)
    assert (dead["status"], dead["attempt"]) == ("DEAD_LETTERED", 1)
    wait_for(lambda: time.time() > datetime.fromisoformat(dead["expires_at"]).timestamp(), timeout=5)
    entry_id = entry_of(live_engine, task_id)
    response = api.post(f"/api/v1/dlq/{entry_id}/retry")
    assert response.status_code == 200 and response.json() == {"count": 1, "not_found": 0, "kept": 0}
    task = live_engine.tasks.get(task_id)
    assert task["status"] == "QUEUED" and task["attempt"] == 0 and "dlq_entry_id" not in task
    assert task["retried_from_dlq_at"].endswith("Z")
    assert task["expires_at"] is None  # an operator's retry is not undone by a passed ttl
    # A lean record: what the retry clears is removed, not left as an empty field.
    raw = redis_client.hgetall(live_engine.keys.task(task_id))
    assert not {"dlq_entry_id", "finished_at", "cancel_requested", "expires_at"} & set(raw), raw
    assert api.get("/api/v1/dlq").json()["results"] == []
    assert api.get("/api/v1/queues/default").json()["dlq"] == 0
    dtq_tasks.task("tests.fixed_later")(lambda payload: "fixed")
    drain(live_engine.config)
    done = live_engine.tasks.get(task_id)
    assert done["status"] == "SUCCEEDED" and done["attempt"] == 1 and done["result"] == "fixed"
    entry = live_engine.audit.list(limit=1).items[0]
    assert (entry["action"], entry["target"], entry["count"]) == ("dlq.retry", f"dlq:{entry_id}", 1)
    assert_error(api.post(f"/api/v1/dlq/{entry_id}/retry"), 404, "DLQ_ENTRY_NOT_FOUND")


def test_discard_drops_the_entry_and_records_it_on_the_task(
        api: APIClient, live_engine: Engine, redis_client: redis.Redis) -> None:
    [task_id] = make_dead_letters(live_engine, 1)
    entry_id = entry_of(live_engine, task_id)
    assert api.post(f"/api/v1/dlq/{entry_id}/discard").json() == {"count": 1}
    assert live_engine.dlq.count() == 0 and live_engine.queues.get("default")["dlq"] == 0
    assert live_engine.tasks.get(task_id)["status"] == "DEAD_LETTERED"
    assert redis_client.hget(live_engine.keys.task(task_id), "dlq_discarded_at")
    shown = api.get(f"/api/v1/tasks/{task_id}").json()  # what the API says it records, it shows
    assert shown["dlq_discarded_at"].endswith("Z") and "dlq_entry_id" not in shown
    assert live_engine.audit.list(limit=1).items[0]["action"] == "dlq.discard"


def test_bulk_retry_by_ids_task_ids_filters_and_all(api: APIClient, live_engine: Engine) -> None:
    a = make_dead_letters(live_engine, 4, queue="a")
    b = make_dead_letters(live_engine, 3, queue="b", type="no.such.type")
    assert post(api, "/api/v1/dlq/retry", {"ids": [entry_of(live_engine, a[0]), entry_of(live_engine, a[1]),
                                                   "abc-1-0"]}).json() == {"count": 2, "not_found": 1, "kept": 0}
    assert post(api, "/api/v1/dlq/retry", {"task_ids": [a[2], "missing"]}).json() == {"count": 1, "not_found": 0,
                                                                                       "kept": 0}
    assert post(api, "/api/v1/dlq/retry", {"queue": "b", "type": "no.such.type"}).json() == {"count": 3,
                                                                                           "not_found": 0, "kept": 0}
    assert {live_engine.tasks.get(t)["status"] for t in a[:3] + b} == {"QUEUED"}
    assert post(api, "/api/v1/dlq/retry", {"all": True}).json() == {"count": 1, "not_found": 0, "kept": 0}
    assert live_engine.dlq.count() == 0
    audit = [(e["action"], e["target"], e["count"]) for e in live_engine.audit.list().items]
    assert audit[0] == ("dlq.retry", "dlq:all", 1) and audit[1] == ("dlq.retry", "dlq:queue=b&type=no.such.type", 3)
    assert len(audit) == 4  # one entry per bulk action, with its count


def test_a_retry_says_which_dead_letters_it_kept_because_their_task_expired(
        api: APIClient, live_engine: Engine) -> None:
    ids = make_dead_letters(live_engine, 3, queue="mail")
    entries = [entry_of(live_engine, t) for t in ids]
    live_engine.client.delete(live_engine.keys.task(ids[0]))  # its retention ran out
    one = api.post(f"/api/v1/dlq/{entries[0]}/retry")
    assert (one.status_code, one.json()) == (200, {"count": 0, "not_found": 0, "kept": 1})
    bulk = post(api, "/api/v1/dlq/retry", {"all": True})
    assert (bulk.status_code, bulk.json()) == (200, {"count": 2, "not_found": 0, "kept": 1})
    assert [e["entry_id"] for e in api.get("/api/v1/dlq").json()["results"]] == [entries[0]]
    assert post(api, "/api/v1/dlq/discard", {"all": True}).json() == {"count": 1}  # what helps, helps


def test_bulk_discard_by_text_search(api: APIClient, live_engine: Engine) -> None:
    make_dead_letters(live_engine, 2, message="disk full")
    make_dead_letters(live_engine, 3, message="timeout talking to bank")
    assert post(api, "/api/v1/dlq/discard", {"q": "bank"}).json() == {"count": 3}
    assert [i["error"] for i in api.get("/api/v1/dlq").json()["results"]] == ["disk full", "disk full"]


def test_bulk_actions_touch_only_the_snapshot(live_engine: Engine) -> None:
    # Entries that arrive after the selection was taken are left alone.
    from dtq_core.engine.audit import Actor
    from dtq_core.engine.dlq import DlqSelection

    make_dead_letters(live_engine, 3)
    snapshot = live_engine.dlq.select(DlqSelection(all=True))
    late = make_dead_letters(live_engine, 2)
    retried = live_engine.dlq.retry(DlqSelection(ids=tuple(snapshot)), Actor.cli())
    assert retried == 3 and {live_engine.tasks.get(t)["status"] for t in late} == {"DEAD_LETTERED"}


@pytest.mark.parametrize("body", [{}, {"all": False}, {"ids": []}, {"queue": ""}, {"colour": "red"}, [],
                                  {"ids": "1-0"}, {"ids": [1]}, {"ids": ["not-an-id"]}, {"ids": ["1-0"]},
                                  {"all": "yes"}, {"ids": ["abc-99999999999999999999-0"]},
                                  {"ids": ["1-0"], "all": True}, {"ids": ["1-0"], "task_ids": ["x"]},
                                  {"task_ids": [""]}, {"queue": 5}, {"ids": ["1-0"] * 10001}])
def test_bulk_refuses_an_empty_or_malformed_selection(api: APIClient, body: Any) -> None:
    for path in ("/api/v1/dlq/retry", "/api/v1/dlq/discard"):
        assert_error(post(api, path, body), 400, "VALIDATION_ERROR")


def test_bulk_refuses_malformed_json_and_wrong_methods(api: APIClient) -> None:
    assert_error(post(api, "/api/v1/dlq/retry", "{"), 400, "MALFORMED_JSON")
    assert_error(api.get("/api/v1/dlq/retry"), 405, "METHOD_NOT_ALLOWED")
    assert_error(api.post("/api/v1/dlq"), 405, "METHOD_NOT_ALLOWED")


def test_dlq_endpoints_answer_503_when_redis_is_down(settings: Any) -> None:
    api = APIClient()
    for response in (api.get("/api/v1/dlq"), api.get("/api/v1/dlq/abc-1-0"), api.post("/api/v1/dlq/abc-1-0/retry"),
                     post(api, "/api/v1/dlq/retry", {"all": True}), post(api, "/api/v1/dlq/discard", {"all": True})):
        assert_error(response, 503, "REDIS_UNAVAILABLE")

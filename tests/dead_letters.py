"""Dead letters written straight into their partitions, for tests of the DLQ's own reading and
actions that need many of them, or control over where they land (which partition, which entry id).

The task record is what a one-attempt task that failed leaves; the dead letter is written by
common.lua's dead_letter, the function every script that dead-letters uses (so the DLQ cap trims
as it does for real). Tests of behaviour end to end make theirs with a real worker instead
(tests/api/support.py make_dead_letters).
"""

from __future__ import annotations

import json
from typing import Any
from uuid import uuid4

from dtq_core.engine import Engine
from dtq_core.scripts import _expand

_PLANT = _expand("""-- #include common
local K = partition_keys(KEYS[1])
local task_id, queue, ttype, message, now_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
rcall('HSET', K.task_prefix .. task_id, 'id', task_id, 'type', ttype, 'queue', queue, 'priority', ARGV[6],
      'payload', ARGV[7], 'attempt', 1, 'max_attempts', 1, 'timeout_s', 300, 'created_at', now_ms,
      'updated_at', now_ms, 'finished_at', now_ms, 'cancel_requested', '0', 'result_truncated', '0',
      'errors', push_error('[]', 1, ARGV[9], message, '', '1970-01-01T00:00:00.000Z'),
      'last_error', ARGV[9] .. ': ' .. message)
rcall('PEXPIRE', K.task_prefix .. task_id, 3600000)
rcall('ZADD', K.recent, now_ms, task_id)
return dead_letter(K, task_id, queue, ttype, 1, ARGV[9], message, now_ms, '1', ARGV[8])
""")


def plant_dead_letters(engine: Engine, count: int, *, queue: str = "default", type: str = "dtq.fail",
                       message: str = "boom", payload: Any = None, priority: str = "normal",
                       tag: str | None = None, error_class: str = "dtq.PermanentError") -> list[str]:
    """Dead-letter `count` new tasks of `queue` (spread over its partitions, or all in `tag`);
    return their task ids, oldest first."""
    layout = engine.registry.ensure(queue)
    body = json.dumps(payload if payload is not None else {"message": message})
    ids = []
    for _ in range(count):
        partition = tag or layout.tag_for()
        task_id = f"{partition}-{uuid4().hex}"
        engine.client.eval(_PLANT, 1, engine.keys.partition(partition), task_id, queue, type, message,
                           engine.clock.now_ms(), priority, body, engine.config.dlq_maxlen, error_class)
        ids.append(task_id)
    return ids

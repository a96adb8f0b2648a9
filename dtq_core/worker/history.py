"""The leader's history roll-up (docs/console.md, "History"; dtq_core/history.py says what the
hashes hold).

Every HISTORY_EVERY_S the leader
- sums the last few minutes of every partition's history into the global roll-ups ("all" and
  "types"), each minute recomputed from scratch and written whole (replaceHash-1.lua): a pass run
  twice, or by two leaders, writes the same numbers, and a completion that lands late in a
  minute is in the next pass;
- once a minute, samples each queue's waiting tasks into the "depth" roll-up;
- folds every complete hour (HOUR_GRACE_MIN after its end) of every partition and roll-up into an
  hour hash, and every day whose hours are folded into a day hash (foldHistory-1.lua, a replace as
  well), and records what it folded (Keys.history_folded) so the next leader starts where this
  one stopped;
- rolls up and folds again the minutes workers announce as written late (Keys.history_late:
  samples a worker held while Redis could not be reached, or while it was stopped), and removes
  the announcements it handled.

Every call touches one slot: a partition's keys or the {hist} roll-ups. Nothing here is on the
task path; a failed pass is logged and the next one does it again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..history import HOUR_TTL_MS, MAX_GLOBAL_TYPES, MINUTE_TTL_MS, OTHER, split_field, to_int
from ..keys import PRIORITIES, Keys
from ..replies import text_hash, text_list

if TYPE_CHECKING:
    from .store import WorkerStore

logger = logging.getLogger("dtq.worker")

HISTORY_EVERY_S = 5.0
RECENT_MINUTES = 3  # minutes recomputed each pass: this one and the two before
HOUR_GRACE_MIN = 2  # an hour is folded this long after its end (late completions, clock skew)
CATCH_UP_HOURS = 24  # a leader folds at most this many hours left behind (minutes live 25 h)
CATCH_UP_MINUTES = 60  # minutes left behind that one pass rolls up (a day of them in 24 passes)
LATE_MINUTES_KEPT = 24 * 60  # minutes written late are rolled up again while this recent (they live 25 h)
GLOBAL_SCOPES = ("all", "types", "depth")


class HistoryRoller:
    def __init__(self, store: WorkerStore) -> None:
        self.store = store
        self.keys: Keys = store.keys
        self._depth_minute = -1

    async def run_once(self, layouts: Mapping[str, Sequence[str]], now_ms: int) -> None:
        """One pass over the queues (queue -> its partitions' tags, serving and draining)."""
        minute = now_ms // 60000
        client = self.store.client
        folded = text_hash(await client.hgetall(self.keys.history_folded()))
        marks = text_list(list(await client.smembers(self.keys.history_late())))
        late = sorted({m for m in map(_late_minute, marks) if minute - LATE_MINUTES_KEPT < m <= minute})
        rolled = await self._roll_minutes(layouts, minute, folded, late)
        if minute != self._depth_minute:
            await self._sample_depth(layouts, minute)
            self._depth_minute = minute
        if await self._fold_hours(layouts, minute, folded, rolled, late) and marks:
            await client.srem(self.keys.history_late(), *marks)  # handled, or too old to matter

    async def _roll_minutes(self, layouts: Mapping[str, Sequence[str]], minute: int, folded: Mapping[str, str],
                            late: Sequence[int]) -> int:
        """Recompute the global minutes from the partitions': the recent ones, those written late,
        and up to CATCH_UP_MINUTES a pass of those no leader rolled (a time without a leader).
        Returns the last minute rolled for good (older than the recent ones)."""
        k, client = self.keys, self.store.client
        recent = minute - RECENT_MINUTES + 1
        rolled = to_int(folded["minute"]) if "minute" in folded else recent - 1
        start = max(rolled + 1, minute - 24 * 60 + 1)
        behind = list(range(start, min(recent, start + CATCH_UP_MINUTES)))
        minutes = behind + list(range(recent, minute + 1))
        minutes += [m for m in late if m not in set(minutes)]
        tags = [tag for queue in sorted(layouts) for tag in layouts[queue]]
        pipe = client.pipeline(transaction=False)
        for tag in tags:
            for m in minutes:
                pipe.hgetall(f"{k.history(tag)}m:{m}")
        replies = iter(await pipe.execute()) if tags else iter(())
        totals: dict[int, dict[str, int]] = {m: {} for m in minutes}
        by_type: dict[int, dict[str, int]] = {m: {} for m in minutes}
        for _tag in tags:
            for m in minutes:
                for name, raw in text_hash(next(replies)).items():
                    n = to_int(raw)
                    _type, metric = split_field(name)
                    totals[m][metric] = totals[m].get(metric, 0) + n
                    by_type[m][name] = by_type[m].get(name, 0) + n
        pipe = client.pipeline(transaction=False)
        for m in minutes:
            await self._replace(pipe, f"{k.global_history('all')}m:{m}", totals[m], MINUTE_TTL_MS)
            await self._replace(pipe, f"{k.global_history('types')}m:{m}", _cap_types(by_type[m]), MINUTE_TTL_MS)
        await self.store.scripts.aexecute(pipe)
        rolled = behind[-1] if behind and behind[-1] < recent - 1 else recent - 1
        await client.hset(k.history_folded(), "minute", rolled)
        return rolled

    async def _replace(self, pipe: Any, key: str, fields: Mapping[str, int], ttl_ms: int) -> None:
        args: list[object] = [ttl_ms]
        for name, n in fields.items():
            args += [name, n]
        await self.store.scripts("replaceHash", keys=[key], args=args, client=pipe)

    async def _sample_depth(self, layouts: Mapping[str, Sequence[str]], minute: int) -> None:
        """Waiting tasks per queue (stream length less entries delivered and not acknowledged), the
        console's definition (engine.queues), written as the minute's sample."""
        k, client = self.keys, self.store.client
        queues = sorted(layouts)
        pipe = client.pipeline(transaction=False)
        for queue in queues:
            for tag in layouts[queue]:
                for priority in PRIORITIES:
                    stream = k.stream(tag, queue, priority)
                    pipe.xlen(stream)
                    pipe.xpending(stream, Keys.GROUP)
        replies = iter(await pipe.execute(raise_on_error=False)) if queues else iter(())
        depth: dict[str, int] = {}
        for queue in queues:
            waiting = 0
            for _tag in layouts[queue]:
                for _priority in PRIORITIES:
                    length, pending = next(replies), next(replies)
                    waiting += max(0, _count(length) - _count(pending))
            depth[queue] = waiting
        depth["*"] = sum(depth.values())
        pipe = client.pipeline(transaction=False)
        await self._replace(pipe, f"{k.global_history('depth')}m:{minute}", depth, MINUTE_TTL_MS)
        await self.store.scripts.aexecute(pipe)

    async def _fold_hours(self, layouts: Mapping[str, Sequence[str]], minute: int, folded: Mapping[str, str],
                          rolled: int, late: Sequence[int]) -> bool:
        """Fold the complete hours and days, and fold again those already folded that hold a
        minute written late; return whether every fold again succeeded."""
        k, client = self.keys, self.store.client
        late_hours = sorted({m // 60 for m in late})
        refolds: list[tuple[str, int]] = []
        last_complete = (minute - HOUR_GRACE_MIN) // 60 - 1
        scopes = [(f"hour:{tag}", k.history(tag), "sum", last_complete)
                  for queue in sorted(layouts) for tag in layouts[queue]]
        # A global hour is folded once its minutes are rolled up.
        global_complete = min(last_complete, (rolled + 1) // 60 - 1)
        scopes += [(f"hour:{scope}", k.global_history(scope), "max" if scope == "depth" else "sum", global_complete)
                   for scope in GLOBAL_SCOPES]
        calls: list[tuple[str, int]] = []
        pipe = client.pipeline(transaction=False)
        fresh: dict[str, int] = {}
        for name, prefix, mode, complete in scopes:
            if name not in folded:
                # A scope no leader folded before (a new queue, a first start): its earlier hours
                # have nothing to fold; it starts from here.
                fresh[name] = complete
                continue
            done = to_int(folded[name])
            for hour in range(max(done + 1, complete - CATCH_UP_HOURS + 1), complete + 1):
                await self._fold(pipe, prefix, mode, "h", hour)
                calls.append((name, hour))
        # Hours folded already that a late write changed (their minutes were re-rolled above),
        # after the hours in order: _settle counts progress from `calls` alone.
        for name, prefix, mode, _complete in scopes:
            for hour in late_hours:
                if name in folded and hour <= to_int(folded[name]):
                    await self._fold(pipe, prefix, mode, "h", hour)
                    refolds.append((name, hour))
        progress, refolded = await self._settle(pipe, calls, fresh, refolds)
        days_refolded = await self._fold_days(scopes, {**folded, **progress}, late_hours)
        # Partitions no longer registered keep no entry here.
        live = {name for name, *_ in scopes} | {"day:" + name.partition(":")[2] for name, *_ in scopes} | {"minute"}
        stale = [name for name in folded if name not in live]
        if stale:
            await client.hdel(k.history_folded(), *stale)
        return refolded and days_refolded

    async def _fold_days(self, scopes: Sequence[tuple[str, str, str, int]], folded: Mapping[str, Any],
                         late_hours: Sequence[int]) -> bool:
        """Fold every day whose 24 hours are folded into a day hash (what the types page reads for
        its 7 and 30 day ranges), recorded as "day:<scope>"; and fold again the days folded
        already that hold an hour folded again. Returns whether every fold again succeeded."""
        client = self.store.client
        calls: list[tuple[str, int]] = []
        refolds: list[tuple[str, int]] = []
        fresh: dict[str, int] = {}
        late_days = sorted({hour // 24 for hour in late_hours})
        pipe = client.pipeline(transaction=False)
        for name, prefix, mode, _ in scopes:
            if name not in folded:
                continue
            day_name = "day:" + name.partition(":")[2]
            complete = (to_int(folded[name]) + 1) // 24 - 1
            if day_name not in folded:
                fresh[day_name] = complete
                continue
            for day in range(max(to_int(folded[day_name]) + 1, complete - 31 + 1), complete + 1):
                await self._fold(pipe, prefix, mode, "d", day)
                calls.append((day_name, day))
        for name, prefix, mode, _ in scopes:
            day_name = "day:" + name.partition(":")[2]
            for day in late_days:
                if day_name in folded and day <= to_int(folded[day_name]):
                    await self._fold(pipe, prefix, mode, "d", day)
                    refolds.append((day_name, day))
        _progress, refolded = await self._settle(pipe, calls, fresh, refolds)
        return refolded

    async def _fold(self, pipe: Any, prefix: str, mode: str, target: str, unit: int) -> None:
        """Queue on pipe the fold of one hour (target "h": its 60 minutes) or day ("d": its 24
        hours) of the scope at prefix."""
        source, size = ("m", 60) if target == "h" else ("h", 24)
        await self.store.scripts("foldHistory", keys=[prefix],
                                 args=[source, unit * size, size, target, unit, HOUR_TTL_MS, mode], client=pipe)

    async def _settle(self, pipe: Any, calls: Sequence[tuple[str, int]], fresh: Mapping[str, int],
                      refolds: Sequence[tuple[str, int]] = ()) -> tuple[dict[str, int], bool]:
        """Run the pipelined folds (`calls`, then `refolds`) and record, per scope, the last unit of
        `calls` folded with no gap before it (with the scopes starting fresh); a failed fold is
        logged and done again next pass. Returns that progress and whether every refold succeeded."""
        progress: dict[Any, Any] = dict(fresh)
        replies = await self.store.scripts.aexecute(pipe, raise_on_error=False) if calls or refolds else []
        for i, ((name, unit), reply) in enumerate(zip([*calls, *refolds], replies, strict=True)):
            if isinstance(reply, Exception):
                logger.warning("history: folding %s %d failed (%s: %s); the next pass tries again",
                               name, unit, type(reply).__name__, reply)
                continue
            if i < len(calls) and progress.get(name, unit - 1) == unit - 1:  # record only a run with no gap
                progress[name] = unit
        if progress:
            await self.store.client.hset(self.keys.history_folded(), mapping=progress)
        return progress, not any(isinstance(r, Exception) for r in replies[len(calls):])


def _late_minute(mark: str) -> int:
    """The minute of a late-write mark ("<minute>:<writer>:<number>"); -1 for anything else."""
    head = mark.partition(":")[0]
    return int(head) if head.isdigit() else -1


def _cap_types(by_type: Mapping[str, int]) -> dict[str, int]:
    """At most MAX_GLOBAL_TYPES types keep a series in the "types" roll-up: the busiest; the rest
    are summed into "(other)"."""
    volume: dict[str, int] = {}
    for name, n in by_type.items():
        ttype, metric = split_field(name)
        if len(metric) == 1:  # outcomes, not the histograms (which count the same tasks again)
            volume[ttype] = volume.get(ttype, 0) + n
    keep = set(sorted(volume, key=lambda t: (-volume[t], t))[:MAX_GLOBAL_TYPES])
    out: dict[str, int] = {}
    for name, n in by_type.items():
        ttype, metric = split_field(name)
        key = name if ttype in keep else f"{OTHER}|{metric}"
        out[key] = out.get(key, 0) + n
    return out


def _count(reply: Any) -> int:
    if isinstance(reply, Exception):
        return 0
    if isinstance(reply, dict):
        return to_int(reply.get("pending"))
    return to_int(reply)

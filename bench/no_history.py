"""A copy of this dtq tree whose scripts write no task history (issue 24): `make bench` drains it
beside the tree itself, interleaved, so the report states what history costs on the hot path
(drain rate, Redis commands and CPU per task) from one run. Only includes/history.lua differs:
history_add returns at once, so no script counts anything."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from .common import ROOT

PARTS = ("dtq_core", "dtq_tasks", "dtq_worker", "dtq_site", "dtq_api", "dtq_dashboard", "bench", "manage.py")
HOOK = "local function history_add(K, now_ms, ttype, status, wait_ms, run_ms)\n"


def tree() -> Path:
    target = Path(tempfile.mkdtemp(prefix="dtq-no-history-"))
    atexit.register(shutil.rmtree, target, True)
    for part in PARTS:
        source = ROOT / part
        if source.is_dir():
            shutil.copytree(source, target / part, ignore=shutil.ignore_patterns("__pycache__", "results", "var"))
        else:
            shutil.copy2(source, target / part)
    history = target / "dtq_core" / "scripts" / "includes" / "history.lua"
    text = history.read_text()
    if HOOK not in text:
        raise SystemExit(f"bench.no_history: {history} no longer defines history_add as expected")
    history.write_text(text.replace(HOOK, HOOK + "  if true then return end  -- bench: no history\n"))
    return target

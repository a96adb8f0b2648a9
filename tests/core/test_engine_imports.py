"""The engine is usable without Django: a script, the bench or another framework builds one from
a DtqConfig. Only dtq_core.conf (settings.DTQ -> the process-wide engine) imports Django."""

from __future__ import annotations

import subprocess
import sys


def test_importing_and_building_the_engine_loads_no_django() -> None:
    code = ("import sys\n"
            "from dtq_core.config import DtqConfig\n"
            "from dtq_core.engine import Engine\n"
            "engine = Engine(DtqConfig(redis_url='redis://127.0.0.1:1/0'))\n"
            "assert engine.tasks and engine.queues and engine.dlq and engine.schedule and engine.workers "
            "and engine.audit\n"
            "print(','.join(sorted(m for m in sys.modules if m == 'django' or m.startswith('django.'))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "", f"dtq_core.engine pulled in Django: {out.stdout.strip()}"

"""Configuration: every DTQ_* default, and one clear line for each kind of bad value."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from typing import Any

import pytest

from dtq_core.config import ConfigError, DtqConfig, env_name, read_env

from ..conftest import ROOT
from ..redis_server import free_port


def test_defaults_match_the_contract() -> None:
    c = read_env(lambda name: None)
    assert (c.redis_url, c.visibility_timeout_s, c.heartbeat_interval_s, c.drain_timeout_s) == (
        "redis://127.0.0.1:6379/0", 30, 5, 30)
    assert (c.task_retention_s, c.result_retention_s, c.result_max_bytes, c.idem_ttl_s) == (604800, 3600, 65536, 86400)
    assert (c.max_queue_depth, c.dlq_enabled, c.dlq_maxlen, c.audit_maxlen, c.max_attempts) == (
        100000, True, 10000, 10000, 5)
    assert (c.retry_base_s, c.retry_max_s, c.task_timeout_s, c.payload_max_bytes) == (1, 300, 300, 1048576)
    assert (c.api_key, c.task_modules) == ("", ())


def test_it_reads_values_from_the_environment() -> None:
    env = {"DTQ_VISIBILITY_TIMEOUT_S": "3", "DTQ_HEARTBEAT_INTERVAL_S": "0.5", "DTQ_DLQ_ENABLED": "false",
           "DTQ_TASK_MODULES": "a.b, c", "DTQ_MAX_QUEUE_DEPTH": "0"}
    c = read_env(env.get)
    assert c.visibility_timeout_s == 3 and c.heartbeat_interval_s == 0.5
    assert c.dlq_enabled is False and c.task_modules == ("a.b", "c") and c.max_queue_depth == 0
    assert c.test_fault == "" and read_env({"DTQ_TEST_FAULT": " after_complete "}.get).test_fault == "after_complete"


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"DTQ_VISIBILITY_TIMEOUT_S": "soon"}, "DTQ_VISIBILITY_TIMEOUT_S"),
        ({"DTQ_MAX_ATTEMPTS": "2.5"}, "DTQ_MAX_ATTEMPTS"),
        ({"DTQ_DLQ_ENABLED": "maybe"}, "DTQ_DLQ_ENABLED"),
        ({"DTQ_HEARTBEAT_INTERVAL_S": "30"}, "DTQ_HEARTBEAT_INTERVAL_S"),
        ({"DTQ_REDIS_URL": "http://example"}, "DTQ_REDIS_URL"),
        ({"DTQ_REDIS_URL": "redis://host:notaport/0"}, "DTQ_REDIS_URL"),
        ({"DTQ_REDIS_URL": "redis://host:6379/abc"}, "DTQ_REDIS_URL's path must be a database number"),
        ({"DTQ_REDIS_URL": "redis://host:6379/0/1"}, "DTQ_REDIS_URL"),
        ({"DTQ_RESULT_MAX_BYTES": "0"}, "DTQ_RESULT_MAX_BYTES"),
        ({"DTQ_MAX_QUEUE_DEPTH": "-1"}, "DTQ_MAX_QUEUE_DEPTH"),
        ({"DTQ_TEST_FAULT": "after_lunch"}, "DTQ_TEST_FAULT must be empty or one of after_claim_due, after_complete"),
    ],
)
def test_it_names_the_bad_variable(env: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        read_env(env.get)


def test_from_mapping_accepts_settings_style_keys() -> None:
    c = DtqConfig.from_mapping({"REDIS_URL": "redis://127.0.0.1:1/0", "TASK_MODULES": "x,y", "UNKNOWN": 1})
    assert c.redis_url.endswith(":1/0") and c.task_modules == ("x", "y")


@pytest.mark.parametrize("command", [["check"], ["runworker_dtq", "--burst"]])
def test_every_entry_point_stops_with_one_line(command: list[str]) -> None:
    # It should fail at start, name the variable, and print no traceback.
    env = {"PATH": "/usr/bin:/bin", "DTQ_HEARTBEAT_INTERVAL_S": "40", "DTQ_VISIBILITY_TIMEOUT_S": "30"}
    proc = subprocess.run([sys.executable, "manage.py", *command], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == ["dtq: invalid configuration: DTQ_HEARTBEAT_INTERVAL_S (40) must be less than "
                     "DTQ_VISIBILITY_TIMEOUT_S (30)"]
    assert "Traceback" not in proc.stdout + proc.stderr


@pytest.mark.parametrize("url", ["redis://host", "redis://host/", "redis://:pw@host:6380/15", "rediss://host:6380/3",
                                 "unix:///run/redis.sock?db=2", "redis://host/0/", "redis://host?db=3",
                                 "redis://[::1]:6379/1"])
def test_redis_urls_with_or_without_a_database_number_are_accepted(url: str) -> None:
    assert read_env({"DTQ_REDIS_URL": url}.get).redis_url == url


def test_a_retention_shorter_than_the_idempotency_ttl_is_warned_about(settings: Any) -> None:
    from django.core.checks import run_checks

    from dtq_core.checks import KEYS_OUTLIVE_RECORDS

    settings.DTQ = {**settings.DTQ, "TASK_RETENTION_S": 3600, "IDEM_TTL_S": 86400}
    assert KEYS_OUTLIVE_RECORDS in {m.id for m in run_checks(tags=["dtq"])}
    settings.DTQ = {**settings.DTQ, "TASK_RETENTION_S": 86400}
    assert KEYS_OUTLIVE_RECORDS not in {m.id for m in run_checks(tags=["dtq"])}


# Every numeric DTQ_ setting, read off the dataclass so that settings added later are covered too.
NUMERIC = [f.name for f in dataclasses.fields(DtqConfig) if type(f.default) in (int, float)]


def test_the_numeric_settings_are_all_there() -> None:
    assert {"visibility_timeout_s", "drain_timeout_s", "max_queue_depth", "redis_timeout_s"} <= set(NUMERIC)


@pytest.mark.parametrize("raw", ["nan", "NaN", "inf", "-inf", "Infinity", "1e999", "-1"])
@pytest.mark.parametrize("field", NUMERIC)
def test_every_numeric_setting_refuses_non_finite_and_negative_values(field: str, raw: str) -> None:
    # A NaN visibility timeout compares false with everything: no entry was ever reclaimed.
    name = env_name(field)
    default_type = type(next(f.default for f in dataclasses.fields(DtqConfig) if f.name == field))
    with pytest.raises(ConfigError, match=f"^{name} must be "):
        read_env({name: raw}.get)
    if default_type is float:
        with pytest.raises(ConfigError, match=f"^{name} must be "):
            DtqConfig.from_mapping({field.upper(): float(raw)})  # settings.DTQ written by hand


@pytest.mark.parametrize("field", NUMERIC)
def test_a_non_number_in_settings_dtq_names_the_setting(field: str) -> None:
    with pytest.raises(ConfigError, match=f"^{env_name(field)} must be a number"):
        DtqConfig.from_mapping({field.upper(): "30"})


def _entry_point(command: str) -> list[str]:
    return {
        "runworker_dtq": [sys.executable, "manage.py", "runworker_dtq"],
        "check": [sys.executable, "manage.py", "check"],
        "daphne": [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", "0", "dtq_site.asgi:application"],
        "bin/dtq": ["bin/dtq", "queues"],
        "make run": [sys.executable, "scripts/run.py"],
    }[command]


@pytest.mark.parametrize("command", ["runworker_dtq", "check", "daphne", "bin/dtq", "make run"])
@pytest.mark.parametrize("raw", ["nan", "inf"])
def test_a_non_finite_visibility_timeout_stops_every_entry_point_with_one_line(command: str, raw: str) -> None:
    # The URL points at a closed port: should the value get through, nothing touches a real Redis.
    env = {"PATH": "/usr/bin:/bin", "DTQ_VISIBILITY_TIMEOUT_S": raw, "DTQ_REDIS_URL": "redis://127.0.0.1:1/0",
           "PORT": str(free_port())}
    proc = subprocess.run(_entry_point(command), cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert lines == [f"dtq: invalid configuration: DTQ_VISIBILITY_TIMEOUT_S must be a finite number (got {raw})"]


def test_the_retention_argument_carries_the_policy_and_never_trims_below_the_dlq() -> None:
    assert DtqConfig().retention_arg == "604800000:86400000:10000:10000:failed"
    c = read_env({"DTQ_SUCCEEDED_RETENTION_S": "60", "DTQ_SUCCEEDED_RETENTION_COUNT": "0",
                  "DTQ_FAILED_RETENTION_COUNT": "5", "DTQ_DLQ_MAXLEN": "20", "DTQ_KEEP_PAYLOAD": "all"}.get)
    assert c.retention_arg == "604800000:60000:0:20:all"  # a dead letter keeps its record while in the DLQ
    assert read_env({"DTQ_TASK_RETENTION_S": "3600"}.get).retention_arg.startswith("3600000:3600000:")
    assert read_env({"DTQ_FAILED_RETENTION_COUNT": "5", "DTQ_DLQ_ENABLED": "false"}.get).retention_arg.endswith(
        ":5:failed")


@pytest.mark.parametrize(("env", "name"), [({"DTQ_KEEP_PAYLOAD": "none"}, "DTQ_KEEP_PAYLOAD"),
                                           ({"DTQ_SUCCEEDED_RETENTION_S": "0"}, "DTQ_SUCCEEDED_RETENTION_S"),
                                           ({"DTQ_SUCCEEDED_RETENTION_COUNT": "-1"}, "DTQ_SUCCEEDED_RETENTION_COUNT")])
def test_a_bad_retention_setting_is_named(env: dict[str, str], name: str) -> None:
    with pytest.raises(ConfigError, match=name):
        read_env(env.get)


def test_a_printed_configuration_does_not_show_the_api_key() -> None:
    config = DtqConfig(api_key="0f1e2d3c4b5a69788796a5b4c3d2e1f0-the-api-key")
    assert "the-api-key" not in repr(config), repr(config)


def test_a_printed_configuration_masks_the_redis_password_and_shows_the_rest() -> None:
    config = DtqConfig(redis_url="redis://dtq:hunter2-redis-password@redis.internal:6379/0", key_prefix="app")
    assert "hunter2-redis-password" not in repr(config), repr(config)
    assert "redis_url='redis://dtq:***@redis.internal:6379/0'" in repr(config)
    assert repr(config).startswith("DtqConfig(") and "key_prefix='app'" in repr(config)

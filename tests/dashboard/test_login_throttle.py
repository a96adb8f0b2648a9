"""The console's /login/ is rate limited (django-axes): after DTQ_LOGIN_FAILURE_LIMIT wrong
passwords for one username from one address, every try is refused, the right password too, with a
page that says why and for how long, until the cool-off ends."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ..conftest import wait_for

PASSWORD = "pw-right-123456"


@pytest.fixture
def staff(db: Any) -> User:
    return User.objects.create_user("ops", password=PASSWORD, is_staff=True)


def log_in(client: Client, password: str, ip: str = "10.0.0.1", username: str = "ops") -> Any:
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=ip)


def test_failures_past_the_limit_lock_the_username_and_address_out(settings: Any, staff: User) -> None:
    limit = settings.AXES_FAILURE_LIMIT
    assert limit == 5  # the documented default (docs/security.md)
    client = Client()
    for _ in range(limit - 1):
        response = log_in(client, "wrong")
        assert response.status_code == 200 and b"didn't match" in response.content
    locked = log_in(client, "wrong")  # the limit-th failure locks
    for response in (locked, log_in(client, "wrong"), log_in(client, PASSWORD)):  # the right one too
        assert response.status_code == 429
        text = response.content.decode()
        assert "Too many failed logins" in text and "“ops”" in text and "failed 5 times" in text
        assert "locked for 15 minutes" in text and "even the right password is refused" in text
    assert "_auth_user_id" not in client.session
    # Per username and address: the same user elsewhere, and other users here, still log in.
    assert log_in(Client(), PASSWORD, ip="10.0.0.2").status_code == 302
    User.objects.create_user("other", password=PASSWORD, is_staff=True)
    assert log_in(Client(), PASSWORD, username="other").status_code == 302


def test_the_lock_ends_after_the_cool_off(settings: Any, staff: User) -> None:
    settings.AXES_COOLOFF_TIME = timedelta(seconds=1)
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        log_in(client, "wrong")
    assert log_in(client, PASSWORD).status_code == 429
    # Each try while locked restarts the cool-off, so the polls are spaced wider than it.
    wait_for(lambda: log_in(client, PASSWORD).status_code == 302, timeout=15, interval=1.5,
             message="still locked after the cool-off")
    assert client.session["_auth_user_id"] == str(staff.pk)


def test_a_success_before_the_limit_resets_the_count(settings: Any, staff: User) -> None:
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        log_in(client, "wrong")
    assert log_in(client, PASSWORD).status_code == 302
    client.logout()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert log_in(client, "wrong").status_code == 200  # counting starts again
    assert log_in(client, PASSWORD).status_code == 302

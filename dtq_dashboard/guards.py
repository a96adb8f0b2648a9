"""View decorators: the read policy, the action policy (POST, staff, permission) and error pages."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET

from dtq_api.middleware import request_id_of
from dtq_core.engine.audit import Actor
from dtq_core.errors import DeadLetterNotFound, DtqError, QueueNotFound, RedisTrouble, TaskNotFound, ValidationError
from dtq_core.redis_errors import (
    AUTH_FAILED,
    LOADING,
    NO_PERMISSION,
    REPLICATION,
    WRITE_REFUSED,
    WRONG_DB,
    redis_trouble,
)

from .models import ACTION_PERMISSIONS
from .permissions import can_act, can_view_console

logger = logging.getLogger(__name__)
View = Callable[..., HttpResponse]
NOT_FOUND = (TaskNotFound, QueueNotFound, DeadLetterNotFound)


def _not_found(exc: DtqError) -> bool:
    """A lookup that found nothing (a 404 in the API): the listed kinds and any other, such as a
    periodic task's."""
    return isinstance(exc, NOT_FOUND) or exc.http_status == 404


def to_login(back: str) -> HttpResponse:
    """The console's login page, not settings.LOGIN_URL: a project's may be another app's (or unset)."""
    return redirect_to_login(back, login_url=reverse("dtq_dashboard:login"))


# Redis trouble that is DTQ_REDIS_URL's, not Redis's: a database it lacks, a user it refuses or
# does not grant what dtq needs. Waiting does not end it; the page says to fix the setting.
CONFIGURATION = (WRONG_DB, AUTH_FAILED, NO_PERMISSION)


def unavailable(request: HttpRequest, trouble: RedisTrouble | None = None) -> HttpResponse:
    """The page for Redis trouble (dtq_core.redis_errors): what is wrong and what was not done."""
    title = "Redis is unavailable"
    if trouble is not None and trouble.kind in CONFIGURATION:
        detail = f"{trouble.state}. Nothing was read or changed; fix the setting and restart."
    elif trouble is not None and trouble.kind == WRITE_REFUSED:
        title = "Redis refuses writes"
        detail = f"{trouble.state}. Nothing was changed; try again once Redis takes writes (check /ready)."
    elif trouble is not None and trouble.kind == REPLICATION:  # DTQ_REDIS_MIN_REPLICAS: the write was made
        title = "Redis replicas did not confirm the change"
        detail = (f"{trouble.state}. The change was made on the master, but a failover could still undo it; "
                  "check that it shows, and do it again if it does not.")
    elif trouble is not None and trouble.kind == LOADING:
        detail = (f"{trouble.state}. Nothing was read or changed; this page works again as soon as it "
                  "has (check /ready).")
    else:
        detail = ("The console cannot reach Redis right now. Nothing was read or changed; "
                  "this page works again as soon as Redis answers (check /ready).")
    return render(request, "dtq_dashboard/error.html", {"title": title, "detail": detail},
                  status=503)


def _log_trouble(what: str, request: HttpRequest, trouble: RedisTrouble) -> None:
    if trouble.kind in CONFIGURATION:  # it will not pass by itself
        logger.error("console %s failed: %s", what, trouble.state)
    else:
        logger.warning("console %s failed: redis %s path=%s", what, trouble.kind, request.path)


def console_page(view: View) -> View:
    """Apply the read policy and turn Redis outages, unknown ids and bad cursors into pages."""

    @require_GET
    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not can_view_console(request.user):
            return to_login(request.get_full_path())
        try:
            with redis_trouble():
                return view(request, *args, **kwargs)
        except RedisTrouble as exc:
            _log_trouble("read", request, exc)
            return unavailable(request, exc)
        except ValidationError as exc:
            return render(request, "dtq_dashboard/error.html", {"title": "Bad request", "detail": exc.message},
                          status=400)
        except DtqError as exc:
            if not _not_found(exc):
                raise
            return render(request, "dtq_dashboard/error.html", {"title": "Not found", "detail": exc.message},
                          status=404)

    return wrapper


def safe_next(request: HttpRequest, default: str) -> str:
    """Where an action goes back to: the form's `next` when it is a local URL."""
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()},
                                                   require_https=request.is_secure()):
        return target
    return default


def login_locked_out(request: HttpRequest, original_response: HttpResponse | None = None,
                     credentials: dict[str, Any] | None = None) -> HttpResponse:
    """django-axes' lockout page (AXES_LOCKOUT_CALLABLE): what happened, for how long, what to do."""
    from django.conf import settings

    minutes = max(1, round(settings.AXES_COOLOFF_TIME.total_seconds() / 60))
    username = (credentials or {}).get("username") or request.POST.get("username", "")
    logger.warning("console login locked out username=%s ip=%s", username, request.META.get("REMOTE_ADDR", ""))
    return render(request, "dtq_dashboard/error.html", {
        "title": "Too many failed logins",
        "detail": f"Logging in as “{username}” from this address failed {settings.AXES_FAILURE_LIMIT} times, so it "
                  f"is locked for {minutes} minute{'s' if minutes != 1 else ''} after the last try: until then even "
                  "the right password is refused, and each try starts the wait again. Try again later, or ask "
                  "an administrator to unlock it "
                  "(manage.py axes_reset_username <name>).",
    }, status=429)


def console_action(codename: str, *, default_next: Callable[..., str]) -> Callable[[View], View]:
    """POST only (GET is 405), staff with the named permission, audited as `user:<name>` by the engine.

    Refusals happen before the view runs, so an anonymous or non-staff POST changes nothing and
    writes no audit entry. The view gets an Actor and the URL to redirect back to.
    """
    if codename not in ACTION_PERMISSIONS:
        raise ValueError(f"unknown console permission {codename!r}")

    def decorate(view: View) -> View:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method != "POST":  # an action's URL opened as a page: say so, change nothing
                response = render(request, "dtq_dashboard/error.html", {
                    "title": "Not a page",
                    "detail": "This address performs an action when its button is pressed (a POST). "
                              "Nothing was changed; go back and use the button.",
                }, status=405)
                response["Allow"] = "POST"
                return response
            back = safe_next(request, default_next(*args, **kwargs))
            if not request.user.is_authenticated:
                return to_login(back)
            if not can_act(request.user, codename):
                logger.info("console action refused user=%s permission=%s path=%s",
                            request.user.get_username(), codename, request.path)
                return render(request, "dtq_dashboard/error.html", {
                    "title": "Permission denied",
                    "detail": f"This action needs a staff account with the “{ACTION_PERMISSIONS[codename]}” "
                              "permission. Nothing was changed.",
                }, status=403)
            actor = Actor.user(request.user.get_username(), source="console",
                               request_id=request_id_of(request))
            try:
                with redis_trouble():
                    return view(request, actor, back, *args, **kwargs)
            except RedisTrouble as exc:
                _log_trouble("action", request, exc)
                return unavailable(request, exc)
            except DtqError as exc:
                messages.error(request, exc.message)
                return redirect(back)

        return wrapper

    return decorate

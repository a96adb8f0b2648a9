"""Django settings for dtq, read from the environment with django-environ.

Invalid DTQ_* configuration stops every entry point here with one line naming the variable.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import environ

from dtq_api.checks import DEVELOPMENT_SECRET_KEY
from dtq_core.conf import read_environment
from dtq_core.config import ConfigError, DtqConfig

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env()
# `make run` (scripts/run.py) keeps its generated state here and writes the Redis URL it uses to
# redis.url, so manage.py and bin/dtq beside it read that Redis, not an unrelated one on 6379.
LOCAL_STATE_DIR = Path(env.str("DTQ_LOCAL_STATE_DIR", default="") or BASE_DIR / "var")
LOCAL_REDIS_URL_FILE = LOCAL_STATE_DIR / "redis.url"

try:
    DTQ = read_environment().as_settings()
    # (url, where it came from): operator commands print it when it was implicit (dtq_worker.ops).
    DTQ_REDIS_URL_ORIGIN = (DTQ["REDIS_URL"], "DTQ_REDIS_URL")
    if env.str("DTQ_REDIS_URL", default=None) is None:
        DTQ_REDIS_URL_ORIGIN = (DTQ["REDIS_URL"], f"the default: DTQ_REDIS_URL is unset and there is no "
                                                  f"{LOCAL_REDIS_URL_FILE} from make run")
        if LOCAL_REDIS_URL_FILE.is_file():
            try:
                DTQ["REDIS_URL"] = LOCAL_REDIS_URL_FILE.read_text(encoding="utf-8").strip()
                DtqConfig.from_mapping(DTQ)
            except (OSError, UnicodeDecodeError, ConfigError) as exc:
                raise ConfigError(f"{LOCAL_REDIS_URL_FILE} (written by make run): {exc}") from None
            DTQ_REDIS_URL_ORIGIN = (DTQ["REDIS_URL"], f"{LOCAL_REDIS_URL_FILE}, written by make run")
    DEBUG = env.bool("DJANGO_DEBUG", default=False)
    # Console reads are open by default; true makes every console page (and /ws/events) need login.
    DTQ_CONSOLE_LOGIN_REQUIRED = env.bool("DTQ_CONSOLE_LOGIN_REQUIRED", default=False)
    DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'var' / 'db.sqlite3'}")}
    DTQ_LOG_FORMAT = env.str("DTQ_LOG_FORMAT", default="").strip().lower() or "text"  # empty = unset
    if DTQ_LOG_FORMAT not in ("text", "json"):
        raise ConfigError(f"DTQ_LOG_FORMAT must be text or json (got {DTQ_LOG_FORMAT!r})")
    DTQ_LOG_LEVEL = env.str("DTQ_LOG_LEVEL", default="").strip().upper() or "INFO"
    if DTQ_LOG_LEVEL not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise ConfigError(f"DTQ_LOG_LEVEL must be DEBUG, INFO, WARNING, ERROR or CRITICAL (got {DTQ_LOG_LEVEL!r})")
    # Console/admin login throttling (django-axes): failures per username and IP, then a cool-off.
    DTQ_LOGIN_FAILURE_LIMIT = env.int("DTQ_LOGIN_FAILURE_LIMIT", default=5)
    DTQ_LOGIN_COOLOFF_S = env.int("DTQ_LOGIN_COOLOFF_S", default=900)
    for _name, _value in (("DTQ_LOGIN_FAILURE_LIMIT", DTQ_LOGIN_FAILURE_LIMIT), ("DTQ_LOGIN_COOLOFF_S",
                                                                             DTQ_LOGIN_COOLOFF_S)):
        if _value < 1:
            raise ConfigError(f"{_name} must be 1 or more (got {_value})")
except ConfigError as exc:
    sys.stderr.write(f"dtq: invalid configuration: {exc}\n")
    raise SystemExit(2) from None
except (ValueError, environ.ImproperlyConfigured) as exc:
    sys.stderr.write(f"dtq: invalid configuration: {exc}\n")
    raise SystemExit(2) from None

# The default is public: `check --deploy` reports it (dtq.E002) and daphne with DEBUG off refuses it.
SECRET_KEY = env.str("DJANGO_SECRET_KEY", default=DEVELOPMENT_SECRET_KEY)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's files for /api/docs/, served locally (no CDN)
    "channels",
    "django_tasks",  # the Django Tasks backport (Django 5.2): its checks and signals
    "dtq_core",
    "dtq_api",
    "dtq_dashboard",
    "dtq_worker",
    "django_prometheus",
    "axes",
]

MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "dtq_api.middleware.RequestIdMiddleware",
    "dtq_api.middleware.ContentLengthMiddleware",
    "dtq_core.logs.RequestLogContextMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes requires: turns a lockout into its page
]

ROOT_URLCONF = "dtq_site.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],  # every template ships inside its app (dtq_dashboard/templates)
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]
WSGI_APPLICATION = "dtq_site.wsgi.application"
ASGI_APPLICATION = "dtq_site.asgi.application"

# Django's Tasks framework (django-tasks backport) runs @task functions on dtq workers:
# docs/django-tasks.md. Workers import this too: the decorator validates against it.
TASKS = {
    "default": {
        "BACKEND": "dtq_core.django_tasks.DtqBackend",
        "QUEUES": ["default"],
        "OPTIONS": {},
    },
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: refuses a locked-out username+IP before any check
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = DTQ_LOGIN_FAILURE_LIMIT
AXES_COOLOFF_TIME = timedelta(seconds=DTQ_LOGIN_COOLOFF_S)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]  # one attacker cannot lock a user out everywhere
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "dtq_dashboard.guards.login_locked_out"
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "var" / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise warns on every request without it
STATICFILES_DIRS = [BASE_DIR / "static"]
WHITENOISE_USE_FINDERS = True  # serve from the app dirs too, so collectstatic is optional
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DATA_UPLOAD_MAX_MEMORY_SIZE = int(DTQ["PAYLOAD_MAX_BYTES"]) * 2 + 65536

REST_FRAMEWORK = {
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "DEFAULT_PARSER_CLASSES": ["dtq_api.parsers.JSONParser"],
    "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.SessionAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    "EXCEPTION_HANDLER": "dtq_api.exceptions.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "dtq API",
    "DESCRIPTION": "Distributed task queue on Redis Streams",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"text": {"()": "dtq_core.logs.TextFormatter"}, "json": {"()": "dtq_core.logs.JsonFormatter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": DTQ_LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": DTQ_LOG_LEVEL},
    # axes: its start banner would land on every CLI command's stderr; lockouts are WARNING.
    "loggers": {"django.channels.server": {"level": "WARNING"}, "axes": {"level": "WARNING"}},
}

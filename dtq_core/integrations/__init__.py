"""Optional integrations with libraries a project already runs: OpenTelemetry (otel.py) and
Sentry (sentry.py). Each is on when its library is importable (and, for Sentry, initialised) and
its setting is not "off"; absent, it costs one cached check per task."""

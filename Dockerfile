# dtq: one image for the API (daphne), the workers (manage.py runworker_dtq) and migrations.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Dependencies first, so code changes do not reinstall them (all wheels: no compiler needed). The
# runtime lock only, psycopg for compose's PostgreSQL included; test tools are in requirements-dev.txt.
COPY requirements.txt .
RUN pip install -r requirements.txt

COPY . .

# Run as an unprivileged user; var/ holds the SQLite fallback and collected static files.
RUN useradd --system --uid 10001 --home-dir /app dtq \
    && mkdir -p var/static \
    && DTQ_REDIS_URL=redis://127.0.0.1:6379/0 python manage.py collectstatic --noinput -v 0 \
    && chown -R dtq:dtq var
USER dtq

EXPOSE 8000
# The API by default; docker-compose.yml gives the workers and the migrate job their commands.
CMD ["python", "-m", "daphne", "-b", "0.0.0.0", "-p", "8000", "dtq_site.asgi:application"]

"""Settings for `python -m bench.bench_http` only: dtq's own, plus the bare Django JSON views
(bench.http_urls) that the submit endpoints are measured against on the same server stack."""

from dtq_site.settings import *  # noqa: F403 - the product's settings, unchanged but for the URLconf

ROOT_URLCONF = "bench.http_urls"

"""One module per system, imported inside that system's own virtualenv (dtq's: .venv).

Each registers the two tasks of the benchmark, `incr_sync` (a plain function: the SYNC body) and,
where the library has async workers, `incr_async` (a coroutine: the ASYNC body), both calling
bench.peers.apps.body, so every system runs the same body code on the same client settings.
Each defines `send(key, body)` to enqueue one task of that kind, and `send_many(key, n, body)`
where the library has a bulk enqueue API. Knobs the benchmark explores come from BENCH_*
environment variables set by bench.peers.systems. The Redis URL comes from BENCH_REDIS_URL.
"""

"""One module per peer, imported inside that peer's own virtualenv (never dtq's).

Each defines the same no-op task (INCR of the counter named by its one argument) and
`send(key)` to enqueue one; `send_many(key, n)` where the library has a bulk enqueue API.
The Redis URL comes from BENCH_REDIS_URL.
"""

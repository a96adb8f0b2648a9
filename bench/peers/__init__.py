"""`make bench-peers`: dtq against Celery, Dramatiq, Huey, RQ, arq, SAQ and taskiq, side by side.

The orchestrator (`python -m bench.peers`) runs in dtq's .venv; each peer is installed into its
own virtualenv under var/ and driven there by `bench.peers.driver`. Nothing here imports a peer.
"""

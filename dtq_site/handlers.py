"""Django's ASGI handler, tuned for sync views: one thread hop into the middleware chain, and
request threads reused instead of started and joined for every request.

Under ASGI Django loads the middleware chain in async mode. Every view here is sync (DRF and the
console) and most middleware have only sync hooks, so each hook and the view crossed between the
event loop and a thread on its own: a dozen hops per request. And each request's thread-sensitive
context started a thread and joined it afterwards, which holds the event loop while the new thread
gets the GIL. Together they capped one daphne process at about 150 submits/s.

Django's handler also crossed into the thread for request_started's receivers and again for
response.close() (request_finished's): three visits per request, each a wake-up of the thread and
one of the loop, about a third of daphne's CPU per request.

This handler loads the chain in sync mode and enters it once, together with both signals, and
gives each request a single-thread executor from a free list (asgiref's
ThreadSensitiveContext(executor=...)). A request still has its own thread for everything it runs
(Django's DB connection handling relies on that), concurrent requests never queue behind each
other, and the rest of Django's ASGI handling (body reading, disconnects, streaming) is unchanged.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers import base
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.http import FileResponse, HttpRequest, HttpResponseBase
from django.urls import set_script_prefix

MAX_IDLE_THREADS = 64  # request threads kept for reuse; more are created on demand, then retired
logger = logging.getLogger("dtq.site")


class RequestThread(ThreadPoolExecutor):
    """One request's thread, which knows when nothing of its last request still runs on it."""

    def __init__(self) -> None:
        super().__init__(1, thread_name_prefix="dtq-request")
        self._lock = threading.Lock()
        self._running = 0
        self._when_idle: Callable[[], None] | None = None

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self._lock:
            self._running += 1
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._finished)
        return future

    def _finished(self, _: Future[Any]) -> None:
        with self._lock:
            self._running -= 1
            callback = self._when_idle if self._running == 0 else None
            if callback is not None:
                self._when_idle = None
        if callback is not None:
            callback()

    def idle_now_or_later(self, callback: Callable[[], None]) -> bool:
        """True when idle now; otherwise call `callback` (from this thread) once it is."""
        with self._lock:
            if self._running == 0:
                return True
            self._when_idle = callback
            return False


class SyncChainASGIHandler(ASGIHandler):
    def __init__(self) -> None:
        base.BaseHandler.__init__(self)
        self.load_middleware(is_async=False)
        self._idle: list[RequestThread] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        executor = self._idle.pop() if self._idle else RequestThread()
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            self._recycle_when_idle(executor)

    def _recycle_when_idle(self, executor: RequestThread) -> None:
        """A view abandoned by a cancelled request (daphne gives up on it) may still run on the
        thread: the next request must not queue behind it, so it is reused only once idle."""
        loop = asyncio.get_running_loop()

        def from_the_thread() -> None:
            try:
                loop.call_soon_threadsafe(self._recycle, executor)
            except RuntimeError:  # the loop has closed (server shut down): nothing to reuse it for
                executor.shutdown(wait=False)

        if executor.idle_now_or_later(from_the_thread):
            self._recycle(executor)

    def _recycle(self, executor: RequestThread) -> None:
        if len(self._idle) < MAX_IDLE_THREADS:
            self._idle.append(executor)
        else:
            executor.shutdown(wait=False)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        response: HttpResponseBase = await sync_to_async(self.get_response, thread_sensitive=True)(request)
        return response

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """ASGIHandler.handle with one thread hop where Django makes three: request_started's
        sync receivers, the view, and response.close() (request_finished's receivers) each
        crossed into the request's thread and back. Here they run in one visit, and a response
        held in memory is closed before it is sent (its bytes are already made; request_finished
        then comes a send earlier). A streaming response is closed after its last chunk, as by
        Django. Disconnects are watched for as by Django."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))

        def respond() -> tuple[HttpResponseBase, bool]:
            signals.request_started.send(sender=self.__class__, scope=scope)
            request, error_response = self.create_request(scope, body_file)
            if request is None:
                assert error_response is not None  # create_request answers one or the other
                response: HttpResponseBase = error_response
            else:
                response = self.get_response(request)
                response._handler_class = self.__class__  # type: ignore[attr-defined]  # as run_get_response
                if isinstance(response, FileResponse):
                    response.block_size = self.chunk_size
            closed = not response.streaming
            if closed:
                response.close()
            return response, closed

        async def process_request() -> tuple[HttpResponseBase, bool]:
            response, closed = await sync_to_async(respond, thread_sensitive=True)()
            try:
                await self.send_response(response, send)
            except asyncio.CancelledError:
                pass  # the client went away during the send
            return response, closed

        listening = asyncio.create_task(self.listen_for_disconnect(receive))
        responding = asyncio.create_task(process_request())
        tasks: list[asyncio.Task[Any]] = [listening, responding]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:  # as Django: the disconnect watcher first, then the request
            if task.done():
                try:
                    task.result()
                except RequestAborted:
                    pass
                except AssertionError:
                    body_file.close()
                    raise
            else:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        try:
            response, closed = responding.result()
        except asyncio.CancelledError:
            await signals.request_finished.asend(sender=self.__class__)
        else:
            if not closed:
                await sync_to_async(response.close)()
        body_file.close()


def get_sync_chain_asgi_application() -> SyncChainASGIHandler:
    """Like django.core.asgi.get_asgi_application, with the handler above."""
    import django

    django.setup(set_prefix=False)
    refuse_public_secret_key()
    log_dtq_checks()
    return SyncChainASGIHandler()


def freeze_startup_heap() -> None:
    """Keep what Django, DRF, Channels and the URLconf left at start-up (objects that live as long
    as the process) out of the garbage collector's full passes. Requests churn through short-lived
    objects, so those passes come often, and each walked the whole start-up heap while every
    request waited: on daphne, freezing it raised submits 9-14 % and cut their p99 under 16
    connections from 113-122 to 54 ms (docs/performance.md, "the web process's start-up heap").
    The worker does the same (runworker_dtq)."""
    gc.collect()
    gc.freeze()


def refuse_public_secret_key() -> None:
    """A web process with DEBUG off will not sign sessions with a key anyone can read: one line, exit 2."""
    import sys

    from django.conf import settings

    from dtq_api.checks import SECRET_KEY_HINT, public_secret_key

    if settings.DEBUG or not public_secret_key(str(settings.SECRET_KEY)):
        return
    sys.stderr.write(f"dtq: refusing to start with DEBUG off: DJANGO_SECRET_KEY is not set (the built-in key is "
                     f"public, so sessions and CSRF tokens could be forged); {SECRET_KEY_HINT}\n")
    raise SystemExit(2)


def log_dtq_checks() -> None:
    """Log dtq's system checks (W001: destructive operations open to anyone): daphne runs none,
    and the web process's log is where an operator looks."""
    from django.core import checks

    for message in checks.run_checks(tags=["dtq"]):
        logger.warning("%s", message)

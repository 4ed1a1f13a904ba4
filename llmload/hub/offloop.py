"""The store read off gevent's loop: every call of the hub's store in a thread of gevent's
pool (`OffLoop`), so that a database that makes a read wait (SQLite's lock held by another
process, a slow PostgreSQL) holds that request alone, never the loop that answers the others.

The drivers wait outside Python's lock (sqlite3 and psycopg release it while the database
works or sleeps on a busy lock), so the loop runs meanwhile. A call's exception is raised in
the request that made it, without gevent's pool printing its traceback first (`in_thread`).

But the rows are made into Python objects holding that lock, and every thread that wants it
takes its turn with the loop's thread: ten threads building leaderboards leave the loop a
tenth of the interpreter. So at most THREADS calls run at once (the others wait on the loop,
costing nothing), and calls of the store alike (the same method, the same arguments) made
while one is under way wait for its answer rather than asking again: fifty visitors arriving
at once to a hub just started make one scan of the store's models, not fifty.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gevent
from gevent.event import AsyncResult
from gevent.lock import Semaphore

THREADS = 3
"""Calls running in threads at once (`in_thread`); on 2 CPUs the loop keeps a quarter of the
interpreter at the least."""
_running = Semaphore(THREADS)


class Raised:
    """An exception a call raised in another thread, to raise again where it was asked."""

    def __init__(self, exception: BaseException) -> None:
        self.exception = exception


def outcome(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> Any:
    """`fn`'s value, or its exception wrapped (`Raised`): gevent's thread pool would print the
    traceback of an exception raised in its thread before handing it over, and a 400 or a
    404 is not an error of the hub's."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001  (raised again in the greenlet that asked)
        return Raised(exc)


def in_thread(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` in a thread of gevent's pool, the calling greenlet waiting; its
    exception raised here (gevent's pool would print its traceback before handing it over,
    and a store's one-line error is not a crash)."""
    result = _call(fn, args, kwargs)
    if isinstance(result, Raised):
        raise result.exception
    return result


class OffLoop:
    """A store whose every method runs in a thread (`in_thread`), a call alike to one under
    way waiting for that one's answer; its attributes as they are."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._under_way: dict[tuple, AsyncResult] = {}

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.store, name)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            key = (name, args, tuple(sorted(kwargs.items())))
            try:
                hash(key)
            except TypeError:  # an argument that cannot be a key: a call of its own
                return in_thread(value, *args, **kwargs)
            under_way = self._under_way.get(key)
            if under_way is None:
                under_way = self._under_way[key] = AsyncResult()
                try:
                    under_way.set(_call(value, args, kwargs))
                except BaseException:  # this request was stopped (a timeout): the others ask again
                    under_way.set(_AGAIN)
                    raise
                finally:
                    del self._under_way[key]
            result = under_way.get()
            if result is _AGAIN:
                return in_thread(value, *args, **kwargs)
            if isinstance(result, Raised):
                raise result.exception
            return result
        return call


_AGAIN = object()
"""What waiting calls get when the call they waited for was stopped: ask for themselves."""


def _call(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> Any:
    """`fn`'s value or its exception (`Raised`), run in a thread (`in_thread`'s bound)."""
    with _running:
        return gevent.get_hub().threadpool.apply(outcome, (fn, args, kwargs))

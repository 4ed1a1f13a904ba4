"""The store read off gevent's loop: every call of the hub's store in a thread of gevent's
pool (`OffLoop`), so that a database that makes a read wait (SQLite's lock held by another
process, a slow PostgreSQL) holds that request alone, never the loop that answers the others.

The drivers wait outside Python's lock (sqlite3 and psycopg release it while the database
works or sleeps on a busy lock), so the loop runs meanwhile. A call's exception is raised in
the request that made it, without gevent's pool printing its traceback first (`in_thread`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gevent


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
    result = gevent.get_hub().threadpool.apply(outcome, (fn, args, kwargs))
    if isinstance(result, Raised):
        raise result.exception
    return result


class OffLoop:
    """A store whose every method runs in a thread (`in_thread`); its attributes as they are."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.store, name)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            return in_thread(value, *args, **kwargs)
        return call

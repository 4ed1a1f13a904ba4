"""Submission tokens: who may post runs to a hub started with `--accept-runs`
(`llmload hub-token add|list|revoke`).

A token is `llmload_<id>_<secret>`: `id` (12 hex digits) finds its row, `secret` (43 URL-safe
characters, 256 bits) is checked against a salted scrypt hash of it (`hashlib.scrypt`, n 2^14,
r 8, p 1), compared in constant time. The store keeps the token's name, id, salt and hash:
the token itself is shown once, when it is made, and never again. A revoked token stays
(its name cannot be reused, so what it submitted stays attributable) and is refused.

A check's hash is some 60 ms of CPU, on purpose, so guessing is what could take the hub
down: each failed check cost the event loop 60 ms, and 18 a second held it. So (`check_token`):
- the hash runs in gevent's thread pool, off the loop (scrypt releases Python's lock while it
  works: the loop's other greenlets run meanwhile);
- failed checks are few by rule (`Throttle`, kept per process, in memory, bounded): at most
  `FAILED_PER_S` a second in all and `FAILED_PER_ID` a minute per token id. Over either, a
  token not known good is refused at once, 429 with the seconds to wait, and nothing hashed;
  the allowance is taken before the hash, so a crowd of requests arriving at once hash no
  more than it allows;
- so that guessing locks no submitter out, a token verified once is remembered by its id
  (an HMAC of its secret under a key of this process, never the secret): it is checked again
  in microseconds, past the throttle. Its row is still read on every check, so a revocation
  holds from the next request.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import secrets
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from llmload.core.model.results import utc_now_iso
from llmload.hub import schema
from llmload.hub.database import StoreError, first_line
from llmload.hub.offloop import in_thread
from llmload.hub.store import Store

PREFIX = "llmload_"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
TOKEN = re.compile(r"^llmload_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
SCRYPT = {"n": 2**14, "r": 8, "p": 1, "dklen": 32}
UNKNOWN = "the token is not one this hub knows"

FAILED_PER_S = 4.0
"""Token checks that may fail per second in all, on average: each is a hash of some 60 ms of
CPU, so guessing costs the hub at most a quarter of a CPU."""
FAILED_BURST = 4
"""Failed checks that may come at once, before `FAILED_PER_S` paces them."""
FAILED_PER_ID = 10
"""Failed checks of one token id in `ID_WINDOW_S`; then that id is refused unhashed until the
oldest of them is that old."""
ID_WINDOW_S = 60.0
MAX_IDS = 1024
"""Token ids whose failures are kept (the oldest dropped first). Failures are paced in all,
so at most FAILED_BURST + FAILED_PER_S x ID_WINDOW_S (244) ids have one in the window: none
that still counts is dropped."""
MAX_KNOWN = 1024
"""Tokens remembered as verified (the least recently used dropped first)."""


class TokenError(ValueError):
    """A token command that cannot be done (a bad or taken name, an unknown one); one line."""


class TokenRefused(Exception):
    """A token a submission cannot use: `status` 401 (none given, or not a token), 403
    (unknown or revoked) or 429 (too many failed checks: `retry_after_s`, the seconds to wait;
    None otherwise); the message is one line and never quotes the token."""

    def __init__(self, status: int, message: str, *, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s


@dataclass(frozen=True, slots=True, kw_only=True)
class Throttle:
    """How many token checks may fail (the module's constants say why)."""

    failed_per_s: float = FAILED_PER_S
    failed_burst: int = FAILED_BURST
    failed_per_id: int = FAILED_PER_ID
    id_window_s: float = ID_WINDOW_S
    max_ids: int = MAX_IDS
    max_known: int = MAX_KNOWN


class Guard:
    """This process's memory of token checks: the failures allowed in all (a bucket) and per
    id (each id's last failures), and the tokens verified. Its methods never wait, so
    greenlets cannot interleave inside one; the lock is for threads."""

    def __init__(self, throttle: Throttle = Throttle()) -> None:
        self.throttle = throttle
        self._lock = threading.Lock()
        self._key = secrets.token_bytes(32)
        self._allowance = float(throttle.failed_burst)
        self._filled_at = time.monotonic()
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._known: OrderedDict[str, tuple[bytes, str]] = OrderedDict()

    def _mac(self, secret: str) -> bytes:
        return hmac.new(self._key, secret.encode(), hashlib.sha256).digest()

    def known(self, token_id: str, secret: str) -> str | None:
        """The stored hash of the row this token was verified against, if it was."""
        with self._lock:
            entry = self._known.get(token_id)
            if entry is None or not hmac.compare_digest(entry[0], self._mac(secret)):
                return None
            self._known.move_to_end(token_id)
            return entry[1]

    def take(self, token_id: str) -> TokenRefused | None:
        """Count one check about to be hashed as failed (`verified` gives it back); a 429 to
        raise, nothing counted, where that is one too many."""
        t, now = self.throttle, time.monotonic()
        with self._lock:
            times = self._failures.get(token_id, ())
            while times and times[0] <= now - t.id_window_s:
                times.popleft()
            if len(times) >= t.failed_per_id:
                wait = _seconds(times[0] + t.id_window_s - now)
                return TokenRefused(429, f"{t.failed_per_id} failed checks of this token id in the last "
                                         f"{t.id_window_s:g} s: try again in {wait} s", retry_after_s=wait)
            self._allowance = min(self._allowance + (now - self._filled_at) * t.failed_per_s, t.failed_burst)
            self._filled_at = now
            if self._allowance < 1:
                wait = _seconds((1 - self._allowance) / t.failed_per_s)
                return TokenRefused(429, f"too many failed token checks on this hub (at most {t.failed_per_s:g} a "
                                         f"second): try again in {wait} s", retry_after_s=wait)
            self._allowance -= 1
            self._failures.setdefault(token_id, deque()).append(now)
            self._failures.move_to_end(token_id)
            while len(self._failures) > t.max_ids:
                self._failures.popitem(last=False)
        return None

    def verified(self, token_id: str, secret: str, row_hash: str) -> None:
        """The check `take` counted did not fail: give it back, and remember the token."""
        with self._lock:
            self._allowance = min(self._allowance + 1, self.throttle.failed_burst)
            times = self._failures.get(token_id)
            if times:
                times.pop()
            self._known[token_id] = (self._mac(secret), row_hash)
            self._known.move_to_end(token_id)
            while len(self._known) > self.throttle.max_known:
                self._known.popitem(last=False)


def _seconds(wait_s: float) -> int:
    return max(math.ceil(wait_s), 1)


GUARD = Guard()
"""The hub's guard (a test swaps in its own)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenEntry:
    name: str
    created_at: str
    revoked_at: str | None


def _hash(secret: str, salt: bytes) -> str:
    return hashlib.scrypt(secret.encode(), salt=salt, **SCRYPT).hex()


def _checked_name(name: str) -> str:
    if not NAME.match(name or ""):
        raise TokenError(f"token name {name[:70]!r}: 1-64 letters, digits, '.', '_' or '-', starting with a "
                         "letter or digit")
    return name


def _write(store: Store, statement) -> int:
    try:
        with store.engine.begin() as connection:
            return connection.execute(statement).rowcount
    except IntegrityError:
        raise
    except SQLAlchemyError as exc:
        raise StoreError(f"--db {store.label}: {first_line(exc)}", exit_code=1) from None


def add_token(store: Store, name: str) -> str:
    """Make a token named `name` and give it (the only time it is seen). TokenError when
    the name is malformed or taken (a revoked token's too)."""
    _checked_name(name)
    token_id, secret, salt = secrets.token_hex(6), secrets.token_urlsafe(32), secrets.token_bytes(16)
    row = {"name": name, "token_id": token_id, "salt": salt.hex(), "hash": _hash(secret, salt),
           "created_at": utc_now_iso(), "revoked_at": None}
    try:
        _write(store, sa.insert(schema.tokens).values(**row))
    except IntegrityError:
        raise TokenError(f"a token named {name!r} exists already (revoked or not): choose another name") from None
    return f"{PREFIX}{token_id}_{secret}"


def list_tokens(store: Store) -> list[TokenEntry]:
    """Every token, by name (none of their secrets)."""
    t = schema.tokens.c
    rows = store.rows(sa.select(t.name, t.created_at, t.revoked_at).order_by(t.name))
    return [TokenEntry(name=r.name, created_at=r.created_at, revoked_at=r.revoked_at) for r in rows]


def revoke_token(store: Store, name: str) -> bool:
    """Revoke the token `name`; False where it was revoked already. TokenError when there is none."""
    t = schema.tokens.c
    if not store.rows(sa.select(t.name).where(t.name == name)):
        raise TokenError(f"no token named {name[:70]!r}")
    done = _write(store, sa.update(schema.tokens).where(t.name == name, t.revoked_at.is_(None))
                  .values(revoked_at=utc_now_iso()))
    return done > 0


def _row(store: Store, token_id: str):
    t = schema.tokens.c
    rows = store.rows(sa.select(t.name, t.salt, t.hash, t.revoked_at).where(t.token_id == token_id))
    return rows[0] if rows else None


def _usable(row) -> str:
    if row.revoked_at is not None:
        raise TokenRefused(403, f"the token {row.name!r} was revoked")
    return row.name


def check_token(store: Store, authorization: str | None) -> str:
    """The name of the token an `Authorization: Bearer TOKEN` header carries. Raises
    TokenRefused: 401 without a bearer token; 403 for one the store does not know or has
    revoked (told apart only by the message, never by the timing of the hash); 429 after too
    many failed checks (`GUARD`), unhashed, for a token not verified before."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise TokenRefused(401, "no bearer token given (the Authorization header, Bearer and the token; "
                                "llmload hub-token add NAME makes one)")
    m = TOKEN.match(token.strip())
    if not m:  # its form is public: refused unhashed, it tells nothing of the store
        raise TokenRefused(403, UNKNOWN)
    token_id, secret = m[1], m[2]
    guard = GUARD
    known_hash = guard.known(token_id, secret)
    if known_hash is not None:
        row = _row(store, token_id)  # read again each time: a revocation holds at once
        if row is not None and hmac.compare_digest(row.hash, known_hash):
            return _usable(row)
    refused = guard.take(token_id)  # before the hash: greenlets arriving together share the allowance
    if refused is not None:
        raise refused
    row = _row(store, token_id)
    # the hash is worked out whether or not the id is known, off the loop
    salt = bytes.fromhex(row.salt) if row is not None else b"\0" * 16
    good = hmac.compare_digest(in_thread(_hash, secret, salt), row.hash if row is not None else "0" * 64)
    if row is None or not good:
        raise TokenRefused(403, UNKNOWN)
    guard.verified(token_id, secret, row.hash)
    return _usable(row)

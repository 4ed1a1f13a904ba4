"""Submission tokens: who may post runs to a hub started with `--accept-runs`
(`llmload hub-token add|list|revoke`).

A token is `llmload_<id>_<secret>`: `id` (12 hex digits) finds its row, `secret` (43 URL-safe
characters, 256 bits) is checked against a salted scrypt hash of it (`hashlib.scrypt`, n 2^14,
r 8, p 1), compared in constant time. The store keeps the token's name, id, salt and hash:
the token itself is shown once, when it is made, and never again. A revoked token stays
(its name cannot be reused, so what it submitted stays attributable) and is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from llmload.core.model.results import utc_now_iso
from llmload.hub import schema
from llmload.hub.database import StoreError, first_line
from llmload.hub.store import Store

PREFIX = "llmload_"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
TOKEN = re.compile(r"^llmload_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
SCRYPT = {"n": 2**14, "r": 8, "p": 1, "dklen": 32}


class TokenError(ValueError):
    """A token command that cannot be done (a bad or taken name, an unknown one); one line."""


class TokenRefused(Exception):
    """A token a submission cannot use: `status` 401 (none given, or not a token) or 403
    (unknown or revoked); the message is one line and never quotes the token."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


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


def check_token(store: Store, authorization: str | None) -> str:
    """The name of the token an `Authorization: Bearer TOKEN` header carries. Raises
    TokenRefused: 401 without a bearer token, 403 for one the store does not know or has
    revoked (told apart only by the message, never by the timing of the hash)."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise TokenRefused(401, "no bearer token given (the Authorization header, Bearer and the token; "
                                "llmload hub-token add NAME makes one)")
    m = TOKEN.match(token.strip())
    t = schema.tokens.c
    row = None
    if m:
        rows = store.rows(sa.select(t.name, t.salt, t.hash, t.revoked_at).where(t.token_id == m[1]))
        row = rows[0] if rows else None
    # the hash is worked out whether or not the id is known
    salt = bytes.fromhex(row.salt) if row is not None else b"\0" * 16
    good = hmac.compare_digest(_hash(m[2] if m else token, salt), row.hash if row is not None else "0" * 64)
    if row is None or not good:
        raise TokenRefused(403, "the token is not one this hub knows")
    if row.revoked_at is not None:
        raise TokenRefused(403, f"the token {row.name!r} was revoked")
    return row.name

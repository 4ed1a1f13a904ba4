"""The one secret scrubber: every text llmload writes or prints goes through it.

Pure text work (no I/O). A `Scrubber` masks, with `***`:
- the *known* secrets it was given (the `--api-key` / `OPENAI_API_KEY` value, values of
  secret-named parameters in the `--host` query string, secret-looking environment
  variables), wherever they appear, also URL-encoded;
- the usual ways a secret is written:
  - command-line flags: `--api-key X`, `--api_key X`, `--api-key=X`, `--hf-token X`,
    `--token X`, `--password X` (any of `-`/`_`), where X after a space is not a word of
    prose (`PROSE_WORDS`: "use --api-key or the environment" is left as it is);
  - environment assignments: `OPENAI_API_KEY=X`, `HF_TOKEN=X`, `*_SECRET=X`, `*_PASSWORD=X`;
  - HTTP credentials: `Bearer X`, `Basic X`, `Authorization: X`;
  - URL query parameters: `?api_key=X`, `&token=X`, `key=`, `access_token=`, `sig=`...;
    passwords in URLs (`https://user:X@host`);
  - `key=value` / `"key": "value"` pairs whose key names a secret (`token`, `api_key`,
    `secret`, `password`, `hf_token`, ...) — figures such as `max_tokens=256` are not
    secrets and are left alone;
  - the shapes of common keys: `sk-...`, `hf_...`, `ghp_...`, `xox?-...`, `AKIA...`, JWTs.
- In a JSON-like document (`scrub_obj`), keys that only ever hold secrets (`api_key`,
  `authorization`, `headers`, ...) are dropped and a secret-named key's string value is
  masked whole.

`SCRUBBER` is the process-wide instance: the CLI (and each Locust worker) tells it the known
secrets once, then the results writer, the terminal echo, request records and the logging
filter (`install_log_filter`) all use it.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any, Iterable
from urllib.parse import parse_qsl, quote, quote_plus, urlsplit

MASK = "***"
#: Known secrets shorter than this are not masked by value (they would mask ordinary text);
#: the patterns still apply to them.
MIN_KNOWN_CHARS = 4
#: Texts up to this long are scrubbed once per document by `scrub_obj` (keys, statuses).
SEEN_CHARS = 64
#: Keys dropped anywhere in a document (compared lower-case, exactly).
DROP_KEYS = frozenset({"api_key", "apikey", "authorization", "openai_api_key", "headers",
                       "proxy-authorization", "cookie"})
#: A key whose value is a secret (compared lower-case, on the whole key).
_SECRET_NAME = r"(?:[a-z0-9]+[_-])*(?:api[_-]?key|apikey|token|secret|password|passwd|auth[_-]?token|access[_-]?key|sig|signature)"
_SECRET_KEY_RE = re.compile(rf"^{_SECRET_NAME}$", re.I)
#: Environment variables whose values are remembered as known secrets.
_ENV_SECRET_RE = re.compile(r"(?:API_KEY|APIKEY|_TOKEN|^TOKEN|SECRET|PASSWORD)$")

#: Words that follow a flag or "Bearer" in prose ("use --api-key or the environment", "a Bearer
#: token"): a value written after a space is masked unless it is one of these whole words.
#: Masking values, never words, keeps llmload's own messages readable; after `=` everything
#: is a value.
PROSE_WORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "can", "cannot", "flag", "for",
    "from", "given", "header", "if", "in", "instead", "is", "it", "its", "key", "may", "must",
    "nor", "not", "of", "on", "only", "option", "or", "should", "the", "then", "this", "to",
    "token", "value", "was", "were", "when", "where", "which", "will", "with", "without",
})
_NOT_PROSE = rf"(?!(?:{'|'.join(sorted(PROSE_WORDS))})\b)"

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # --api-key X, --api_key=X, --hf-token X, --token X, --password X
    # (a flag starts a word: "generated-token counter" is prose, not a flag)
    (re.compile(r"((?<![\w-])--?(?:[a-z0-9]+[_-])*(?:api[_-]?key|token|secret|password|passwd)"
                rf"(?:=|\s+{_NOT_PROSE}))(?!-)([^\s'\"]+)", re.I), r"\1" + MASK),
    # OPENAI_API_KEY=X, HF_TOKEN=X, export MY_SECRET="X"
    (re.compile(r"\b([A-Z][A-Z0-9_]*(?:API_KEY|APIKEY|TOKEN|SECRET|PASSWORD)=[\"']?)([^\s\"']+)"),
     r"\1" + MASK),
    # Authorization: X / Bearer X / Basic X / Token X
    (re.compile(rf"(\b(?:Bearer|Basic)\s+){_NOT_PROSE}([A-Za-z0-9._~+/=:-]+)"), r"\1" + MASK),
    # "Token X" only for key-like X: "Token source: chunks" is prose
    (re.compile(r"(\bToken\s+)([A-Za-z0-9._~+/=-]{16,})"), r"\1" + MASK),
    (re.compile(r"(\bauthorization[\"']?\s*[:=]\s*[\"']?)(?!(?:Bearer|Basic|Token)\s)(?!\*\*\*)([^\s\"',;]+)",
                re.I), r"\1" + MASK),
    # URL query parameters
    (re.compile(r"([?&;](?:[a-z0-9_.-]*(?:key|token|secret|password|passwd|auth|sig|signature|credential)"
                r"[a-z0-9_.-]*)=)([^&#\s\"']+)", re.I), r"\1" + MASK),
    # https://user:password@host
    (re.compile(r"(\b[a-z][a-z0-9+.-]*://[^/\s:@]+:)([^@/\s]+)(@)", re.I), r"\1" + MASK + r"\3"),
    # token=X, "api_key": "X", secret: X (the key names a secret; max_tokens=1 does not)
    (re.compile(rf"(\b{_SECRET_NAME}[\"']?\s*[=:]\s*[\"']?)(?!\*\*\*)([^\s,;\"'&}}\]]+)", re.I),
     r"\1" + MASK),
    # the shapes of common keys
    (re.compile(r"\b(?:sk|rk|pk)-[A-Za-z0-9_-]{16,}"), MASK),
    (re.compile(r"\bhf_[A-Za-z0-9]{16,}"), MASK),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"), MASK),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), MASK),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), MASK),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), MASK),
)


class Scrubber:
    """Masks known secrets and secret-looking text; see the module docstring."""

    def __init__(self, known: Iterable[str] = ()) -> None:
        self._known: set[str] = set()
        self._known_re: re.Pattern[str] | None = None
        self.add_known(*known)

    def add_known(self, *secrets: str | None) -> None:
        """Remember secret values (and their URL-encoded forms) to mask wherever they appear."""
        added = False
        for secret in secrets:
            if not secret or len(secret) < MIN_KNOWN_CHARS:
                continue
            for form in {secret, quote(secret, safe=""), quote_plus(secret)}:
                if form not in self._known:
                    self._known.add(form)
                    added = True
        if added:
            # Longest first, so a key that contains another is masked whole.
            alternatives = sorted(self._known, key=len, reverse=True)
            self._known_re = re.compile("|".join(re.escape(s) for s in alternatives))

    def add_known_from_url(self, url: str | None) -> None:
        """Remember the secret-named query values and the password of a URL (e.g. --host)."""
        if not url:
            return
        try:
            parts = urlsplit(url if "://" in url else f"http://{url}")
        except ValueError:
            return
        self.add_known(parts.password)
        for name, value in parse_qsl(parts.query, keep_blank_values=False):
            if re.search(r"key|token|secret|password|passwd|auth|sig|credential", name, re.I):
                self.add_known(value)

    def add_known_from_env(self, environ: dict[str, str]) -> None:
        """Remember the values of secret-named environment variables (OPENAI_API_KEY, HF_TOKEN...)."""
        self.add_known(*(v for k, v in environ.items() if _ENV_SECRET_RE.search(k.upper()) and len(v) >= 8))

    def scrub(self, text: str) -> str:
        """The text with every secret replaced by ***."""
        if not text:
            return text
        if self._known_re is not None:
            text = self._known_re.sub(MASK, text)
        for pattern, replacement in _PATTERNS:
            text = pattern.sub(replacement, text)
        return text

    def scrub_obj(self, obj: Any) -> Any:
        """A copy of a JSON-like value with secrets masked (strings) or dropped (DROP_KEYS)."""
        return self._scrub_obj(obj, {})

    def _scrub_obj(self, obj: Any, seen: dict[str, str]) -> Any:
        # `seen`: each distinct short text scrubbed once per document (a results document
        # repeats its cells' keys and words thousands of times; each scrub is 14 patterns)
        if isinstance(obj, str):
            if len(obj) > SEEN_CHARS:
                return self.scrub(obj)
            clean = seen.get(obj)
            if clean is None:
                clean = seen[obj] = self.scrub(obj)
            return clean
        if isinstance(obj, dict):
            out = {}
            for k, v in obj.items():
                key = self._scrub_obj(str(k), seen)
                if key.lower() in DROP_KEYS:
                    continue
                if isinstance(v, str) and v and _SECRET_KEY_RE.match(key):
                    out[key] = MASK
                else:
                    out[key] = self._scrub_obj(v, seen)
            return out
        if isinstance(obj, (list, tuple)):
            return [self._scrub_obj(v, seen) for v in obj]
        return obj


SCRUBBER = Scrubber()
"""The process-wide scrubber (known secrets added by the CLI and by Locust workers)."""


def scrub(text: str) -> str:
    return SCRUBBER.scrub(text)


def scrub_obj(obj: Any) -> Any:
    return SCRUBBER.scrub_obj(obj)


def remember_secrets(*, api_key: str | None = None, host: str | None = None,
                     environ: dict[str, str] | None = None) -> None:
    """Tell the process-wide scrubber what this run's secrets are."""
    SCRUBBER.add_known(api_key)
    SCRUBBER.add_known_from_url(host)
    SCRUBBER.add_known_from_env(dict(os.environ if environ is None else environ))


class SecretFilter(logging.Filter):
    """A logging filter that scrubs each record's message and traceback text."""

    def __init__(self, scrubber: Scrubber | None = None) -> None:
        super().__init__()
        self.scrubber = scrubber or SCRUBBER

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: leave it to logging's own error path
            return True
        clean = self.scrubber.scrub(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.scrubber.scrub(record.exc_text)
        if record.stack_info:
            record.stack_info = self.scrubber.scrub(record.stack_info)
        return True


def install_log_filter(logger: logging.Logger | None = None) -> None:
    """Add a SecretFilter to every handler of the (root) logger, once."""
    logger = logger or logging.getLogger()
    for handler in logger.handlers:
        if not any(isinstance(f, SecretFilter) for f in handler.filters):
            handler.addFilter(SecretFilter())

"""What makes the hub safe to expose (docs/hub.md, "Safe to expose"): the limits every
request is held to before a route reads it (`check_request`), the headers every response
carries (`add_headers`), and the report pages' inline styles moved where a strict
Content-Security-Policy allows them (`strict_styles`).

The policy lets a page load scripts and styles from the hub's own origin only, and nothing
else from anywhere (`default-src 'none'`); no page of the hub has a script. The hub's own
templates keep their styles in static files (`llmload/hub/static/`). A run's page and the
compare page are `llmload.output`'s self-contained reports, whose charts (matplotlib's SVG)
carry hundreds of `style` attributes: `strict_styles` turns each distinct one into a class
of one generated `<style>` element, and the response's policy allows that page's `<style>`
elements by their sha256 (the policy never says 'unsafe-inline').
"""

from __future__ import annotations

import base64
import hashlib
import html as htmllib
import re

from werkzeug.exceptions import MethodNotAllowed, RequestURITooLarge

from llmload.hub.query import QueryError

METHODS = ("GET", "HEAD")
"""The methods a page or API route answers (HEAD: GET without the body); any other is a 405
(OPTIONS too: Flask would answer it itself). A route declared with other methods answers
those (and never OPTIONS)."""
MAX_PATH_CHARS = 512
"""The longest path answered (longer: 414)."""
MAX_QUERY_BYTES = 2048
"""The longest query string answered (longer: 414)."""
MAX_PARAMS = 16
"""The most query parameters (distinct names) a request may give (more: 400)."""
MAX_VALUE_CHARS = 256
"""The longest value of a query parameter (longer: 400)."""

POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'{hashes}; img-src 'self'; "
          "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
HEADERS = {"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "same-origin",
           "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Resource-Policy": "same-origin"}

_TAG = re.compile(r'<[A-Za-z][A-Za-z0-9:-]*\s[^<>]*?(?<=\s)style="[^"]*"[^<>]*>')
_NAME = re.compile(r"^<[A-Za-z][A-Za-z0-9:-]*")
_STYLE_ATTR = re.compile(r'\sstyle="([^"]*)"')
_CLASS_ATTR = re.compile(r'(?<=\s)class="([^"]*)"')
_DECLARATION = re.compile(r"""(?:[^;"']|"[^"]*"|'[^']*')+""")
_STYLE_ELEMENT = re.compile(r"<style\b[^>]*>(.*?)</style>", re.S)


def check_request(request) -> None:
    """Refuse a request beyond the hub's limits before any route reads it: a method its
    route does not declare (GET and HEAD where none matched; OPTIONS never) (405), a path or
    query string too long (414), a query string that is not UTF-8, too many parameters, a parameter given twice or a value too
    long (400, `QueryError`)."""
    rule = request.url_rule
    allowed = sorted(set(rule.methods or METHODS) - {"OPTIONS"}) if rule is not None else list(METHODS)
    if request.method not in allowed:
        raise MethodNotAllowed(valid_methods=allowed)
    if len(request.path) > MAX_PATH_CHARS or len(request.query_string) > MAX_QUERY_BYTES:
        raise RequestURITooLarge(f"the path or query is too long (at most {MAX_PATH_CHARS} and "
                                 f"{MAX_QUERY_BYTES} characters)")
    try:
        request.query_string.decode("utf-8")  # werkzeug's args would raise on a raw byte that is not UTF-8
    except UnicodeDecodeError:
        raise QueryError("the query string is not UTF-8 (percent-encode it)") from None
    args = request.args
    if len(args) > MAX_PARAMS:
        raise QueryError(f"{len(args)} query parameters: at most {MAX_PARAMS}")
    for name, values in args.lists():
        if len(values) > 1:
            raise QueryError(f"{name[:40]!r} is given {len(values)} times: give it once")
        if len(values[0]) > MAX_VALUE_CHARS:
            raise QueryError(f"{name[:40]!r} is {len(values[0])} characters long: at most {MAX_VALUE_CHARS}")


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def policy(style_hashes: tuple[str, ...] = ()) -> str:
    """The Content-Security-Policy, allowing these `<style>` elements' hashes besides 'self'."""
    return POLICY.format(hashes="".join(" " + h for h in style_hashes))


def add_headers(response) -> None:
    """The security headers, on every response (a page's own policy, `strict_styles`, kept)."""
    response.headers.setdefault("Content-Security-Policy", policy())
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)


def _rule(style: str) -> str:
    """A style attribute's declarations as one rule's body, each !important (as an inline
    style, they beat the page's other rules), `<` escaped (no `</style>` can end it)."""
    declarations = (d.strip() for d in _DECLARATION.findall(htmllib.unescape(style)))
    body = "; ".join(d if d.endswith("!important") else d + " !important" for d in declarations if d)
    return body.replace("<", "\\3c ")


def strict_styles(page: str) -> tuple[str, str]:
    """(the page with every style attribute made a class of one `<style>` element added to
    its head, the Content-Security-Policy allowing its `<style>` elements by their hashes).
    The page is the hub's own making (autoescaped: no `<` or `>` inside an attribute)."""
    rules: dict[str, str] = {}

    def restyle(match: re.Match) -> str:
        tag = match.group(0)
        style = _STYLE_ATTR.search(tag)
        name = "hs-" + hashlib.sha256(style.group(1).encode("utf-8")).hexdigest()[:12]
        rules.setdefault(name, _rule(style.group(1)))
        tag = tag[:style.start()] + tag[style.end():]
        if _CLASS_ATTR.search(tag):
            return _CLASS_ATTR.sub(lambda m: f'class="{m.group(1)} {name}"', tag, count=1)
        return _NAME.sub(lambda m: f'{m.group(0)} class="{name}"', tag, count=1)
    page = _TAG.sub(restyle, page)
    if rules:
        sheet = "<style>\n" + "".join(f".{name} {{ {body} }}\n" for name, body in rules.items()) + "</style>\n"
        at = page.find("</head>")
        page = page[:at] + sheet + page[at:] if at >= 0 else sheet + page
    hashes = tuple(dict.fromkeys(_hash(css) for css in _STYLE_ELEMENT.findall(page)))
    return page, policy(hashes)

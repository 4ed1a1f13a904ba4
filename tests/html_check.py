"""A strict little HTML reader for the tests: well-formedness, elements, text, URLs."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}
#: Attributes that make a browser fetch something.
FETCHING = {"src", "href", "xlink:href", "srcset", "action", "poster", "data", "background"}


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    parent: "Element | None" = None
    children: list["Element"] = field(default_factory=list)
    text: list[str] = field(default_factory=list)

    def iter(self):
        yield self
        for child in self.children:
            yield from child.iter()

    def find_all(self, tag: str, **attrs: str) -> list["Element"]:
        return [e for e in self.iter() if e.tag == tag
                and all(e.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())]

    def all_text(self) -> str:
        return "".join(self.text) + "".join(c.all_text() for c in self.children)

    def texts(self) -> list[str]:
        """Every text node under this element, stripped, in document order."""
        out = [t.strip() for t in self.text if t.strip()]
        for c in self.children:
            out += c.texts()
        return out


class Strict(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.stack = [self.root]
        self.errors: list[str] = []

    def handle_starttag(self, tag, attrs):
        el = Element(tag, {k: v or "" for k, v in attrs}, self.stack[-1])
        self.stack[-1].children.append(el)
        if tag not in VOID:
            self.stack.append(el)

    def handle_startendtag(self, tag, attrs):
        el = Element(tag, {k: v or "" for k, v in attrs}, self.stack[-1])
        self.stack[-1].children.append(el)

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if self.stack[-1].tag != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1].tag}> at {self.getpos()}")
            return
        self.stack.pop()

    def handle_data(self, data):
        self.stack[-1].text.append(data)


def parse(page: str) -> Element:
    """The document tree; fails on mismatched or unclosed tags."""
    assert page.lstrip().lower().startswith("<!doctype html>")
    parser = Strict()
    parser.feed(page)
    parser.close()
    assert not parser.errors, parser.errors[:5]
    assert [e.tag for e in parser.stack] == ["#document"], "unclosed: " + ", ".join(
        e.tag for e in parser.stack[1:])
    return parser.root


def external_urls(root: Element, page: str) -> list[str]:
    """Everything on the page a browser would fetch from elsewhere."""
    found = []
    for el in root.iter():
        for name, value in el.attrs.items():
            if name in FETCHING and not value.startswith(("#", "data:")):
                found.append(f"<{el.tag} {name}={value!r}>")
        if el.tag in ("link", "iframe", "img", "object", "embed"):
            found.append(f"<{el.tag}>")
    found += re.findall(r"url\(\s*['\"]?(?!#)[^)]*\)", page)
    found += re.findall(r"@import[^;]*;", page)
    return found

"""Parsers and normalizers: text made plain, structure into Meta.

Invariants: a parser reads ``Doc.text`` and nothing else (it never opens a file or a URL),
and it never mutates the caller's document — it returns a new one carrying a copy of the
metadata. A normalizer is one ``str -> str`` transform; :class:`Chain` composes them.
A parser is bounded in depth: a document nested deeper than it will follow is refused
(:class:`~hirmem.semantic.errors.Refused`, with the depth), which the pipeline records
before going on with the other documents.
"""

from __future__ import annotations

import html.parser
import json
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from hirmem.semantic.errors import Refused
from hirmem.semantic.stages import Normalizer, Parser
from hirmem.semantic.values import Doc, origin

__all__ = [
    "NFC",
    "ByMediaType",
    "Chain",
    "CollapseSpaces",
    "HTMLParser",
    "JSONParser",
    "MarkdownParser",
    "PlainParser",
    "StripControl",
]


class PlainParser:
    name = "parse/plain"

    def parse(self, doc: Doc) -> Doc:
        meta = dict(doc.meta)
        meta["parser"] = self.name
        return doc.replace(meta=meta)


_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
_EMPH = re.compile(r"(\*\*|__|\*|_|`)(?=\S)(.+?)(?<=\S)\1")
_LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")


class MarkdownParser:
    """Headings into ``meta["headings"]``; markers (#, emphasis, link targets) dropped."""

    name = "parse/markdown"

    def parse(self, doc: Doc) -> Doc:
        headings = [m.group(2) for m in _HEADING.finditer(doc.text)]
        text = _HEADING.sub(lambda m: m.group(2) + ".", doc.text)
        text = _LINK.sub(r"\1", text)
        text = _EMPH.sub(r"\2", text)
        meta = dict(doc.meta)
        meta["headings"] = headings
        meta["parser"] = self.name
        return doc.replace(text=text, meta=meta)


class _TextOf(html.parser.HTMLParser):
    BLOCK = frozenset({"p", "div", "br", "li", "h1", "h2", "h3", "h4", "h5", "h6", "tr",
                       "section", "article", "title"})  # fmt: skip
    SKIP = frozenset({"script", "style", "noscript", "template"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIP:
            self._skip += 1
        if tag == "title":
            self._in_title = True
        if tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP and self._skip:
            self._skip -= 1
        if tag == "title":
            self._in_title = False
        if tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self._in_title:
            self.title += data
            return
        self.parts.append(data)


class HTMLParser:
    """Visible text of an HTML document; ``<title>`` into ``meta["title"]``; scripts dropped
    (as text they are data, never run)."""

    name = "parse/html"

    def parse(self, doc: Doc) -> Doc:
        p = _TextOf()
        p.feed(doc.text)
        p.close()
        text = re.sub(r"\n[ \t]*\n(?:[ \t]*\n)+", "\n\n", "".join(p.parts)).strip("\n")
        meta = dict(doc.meta)
        meta["title"] = p.title.strip()
        meta["parser"] = self.name
        return doc.replace(text=text, meta=meta)


MAX_DEPTH = 100


def nesting(text: str, limit: int) -> int:
    """How deep the arrays and objects of a JSON text nest, counted up to ``limit + 1``
    (one pass, outside strings; nothing is parsed, so nothing recurses)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        elif ch in "]}":
            depth -= 1
    return deepest


class JSONParser:
    """A JSON document as ``path: value`` lines; top-level scalar fields into
    ``meta["fields"]``. Text that is not JSON is left as it is and marked. A document nested
    deeper than ``max_depth`` is refused (:class:`Refused`)."""

    name = "parse/json"

    def __init__(self, max_depth: int = MAX_DEPTH) -> None:
        self.max_depth = max_depth

    def parse(self, doc: Doc) -> Doc:
        meta = dict(doc.meta)
        meta["parser"] = self.name
        if nesting(doc.text, self.max_depth) > self.max_depth:
            raise Refused(f"{doc.source}: JSON nested deeper than {self.max_depth} levels; "
                          "refused rather than parsed")  # fmt: skip
        try:
            value = json.loads(doc.text)
        except ValueError as exc:
            meta["parse_error"] = f"not JSON: {exc}"
            return doc.replace(meta=meta)
        lines: list[str] = []
        _flatten("", value, lines)
        if isinstance(value, Mapping):
            meta["fields"] = {k: v for k, v in value.items()
                              if isinstance(v, str | int | float | bool) or v is None}  # fmt: skip
        return doc.replace(text="\n".join(lines), meta=meta)


def _flatten(prefix: str, value: Any, out: list[str]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _flatten(f"{prefix}[{i}]", v, out)
    else:
        out.append(f"{prefix}: {json.dumps(value, ensure_ascii=False)}")


class ByMediaType:
    """Pick a parser by the media type the document's origin records."""

    name = "parse/by-media-type"

    def __init__(self, parsers: Mapping[str, Parser] | None = None,
                 default: Parser | None = None) -> None:  # fmt: skip
        self.parsers: dict[str, Parser] = dict(parsers) if parsers is not None else {
            "text/markdown": MarkdownParser(),
            "text/html": HTMLParser(),
            "application/json": JSONParser(),
        }
        self.default: Parser = default or PlainParser()

    def parse(self, doc: Doc) -> Doc:
        return self.parsers.get(origin(doc).media_type, self.default).parse(doc)


# ---- normalizers ------------------------------------------------------------------------------


class NFC:
    name = "normalize/nfc"

    def normalize(self, text: str) -> str:
        return unicodedata.normalize("NFC", text)


_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class StripControl:
    name = "normalize/strip-control"

    def normalize(self, text: str) -> str:
        return _CONTROL.sub("", text)


_SPACES = re.compile(r"[ \t\u00a0]+")


class CollapseSpaces:
    """Runs of spaces and tabs to one space; line breaks are kept (they bound sentences)."""

    name = "normalize/collapse-spaces"

    def normalize(self, text: str) -> str:
        return _SPACES.sub(" ", text)


class Chain:
    """A composition of normalizers, applied left to right."""

    def __init__(self, *steps: Normalizer) -> None:
        self.steps = steps
        self.name = "+".join(getattr(s, "name", type(s).__name__) for s in steps)

    def normalize(self, text: str) -> str:
        for step in self.steps:
            text = step.normalize(text)
        return text

"""Ingesters: the only stage that touches the world, and therefore the one that is bounded.

Built in: a file under a root, a directory tree under a root, HTTP(S) bounded by scheme,
host and path, and readers already in memory. Anything else registers an :class:`Ingester`
under a scheme in a :class:`Registry`.

Invariants:

- A reference is caller-supplied, so every driver resolves it against its bounds first: a
  path must resolve (symlinks followed) inside the root; a URL must have an allowed scheme,
  host and path prefix. A redirect is checked against the same bounds before it is followed,
  and one that leaves them fails the ingest (:class:`OutOfBounds`); the response is never
  read.
- A driver that cannot read what it names fails (:class:`IngestError`); it never returns an
  empty document set instead.
- Every document records its origin (:func:`hirmem.semantic.values.with_origin`).
- The HTTP driver ignores proxy settings from the environment unless given ``proxies``.
"""

from __future__ import annotations

import email.utils
import mimetypes
import os
import posixpath
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from hirmem.semantic.errors import IngestError, NotBuilt, OutOfBounds, UnknownDriver
from hirmem.semantic.stages import Ingester
from hirmem.semantic.values import Doc, Origin, doc_id, with_origin

__all__ = [
    "KNOWN_SCHEMES",
    "Bounds",
    "FileIngester",
    "HTTPIngester",
    "MemoryIngester",
    "Registry",
    "TreeIngester",
]

# Schemes a deployment might name that this build does not serve: a distinct error from a
# scheme nobody has heard of.
KNOWN_SCHEMES: Mapping[str, str] = {
    "s3": "object store (register an Ingester for s3)",
    "gs": "object store (register an Ingester for gs)",
    "azblob": "object store (register an Ingester for azblob)",
    "ftp": "FTP (register an Ingester for ftp)",
    "sftp": "SFTP (register an Ingester for sftp)",
    "postgres": "database (register an Ingester for postgres)",
    "kafka": "queue (register an Ingester for kafka)",
    "gdrive": "SaaS API (register an Ingester for gdrive)",
    "notion": "SaaS API (register an Ingester for notion)",
}

TEXT_SUFFIXES = frozenset({".txt", ".md", ".markdown", ".rst", ".html", ".htm", ".json",
                           ".csv", ".log", ".xml"})  # fmt: skip
MAX_BYTES = 16 * 1024 * 1024


def _media_type(name: str) -> str:
    kind, _ = mimetypes.guess_type(name)
    if name.endswith((".md", ".markdown")):
        return "text/markdown"
    return kind or "text/plain"


def _decode(data: bytes, ref: str, charset: str = "utf-8") -> str:
    try:
        return data.decode(charset)
    except (UnicodeDecodeError, LookupError) as exc:
        raise IngestError(f"{ref}: not {charset} text ({exc}); convert it or skip it") from None


def _doc(ref: str, data: bytes, media_type: str, mtime: int, charset: str = "utf-8") -> Doc:
    text = _decode(data, ref, charset)
    org = Origin.of_bytes(ref, data, media_type, mtime)
    return Doc(doc_id(ref, 0, org.sha256), ref, text, with_origin({}, org))


# ---- files ------------------------------------------------------------------------------------


class _Rooted:
    def __init__(self, root: str | Path, max_bytes: int = MAX_BYTES) -> None:
        self.root = Path(root).resolve(strict=True)
        if not self.root.is_dir():
            raise IngestError(f"root {root} is not a directory")
        self.max_bytes = max_bytes

    def _resolve(self, ref: str) -> Path:
        parts = urllib.parse.urlsplit(ref)
        if parts.scheme == "file":
            if parts.netloc not in ("", "localhost"):
                raise OutOfBounds(f"{ref}: a file URL names host {parts.netloc!r}")
            raw = urllib.parse.unquote(parts.path)
        elif parts.scheme and len(parts.scheme) > 1:
            raise OutOfBounds(f"{ref}: scheme {parts.scheme!r} is not a file path")
        else:
            raw = ref
        path = Path(raw)
        if not path.is_absolute():
            path = self.root / path
        try:
            real = path.resolve(strict=True)
        except (OSError, RuntimeError) as exc:
            raise IngestError(f"{ref}: cannot read: {exc}") from None
        if real != self.root and self.root not in real.parents:
            raise OutOfBounds(f"{ref}: resolves to {real}, outside the root {self.root}")
        return real

    def _read(self, path: Path) -> Doc:
        try:
            st = path.stat()
            if st.st_size > self.max_bytes:
                raise IngestError(f"{path}: {st.st_size} bytes, the limit is {self.max_bytes}")
            data = path.read_bytes()
        except OSError as exc:
            raise IngestError(f"{path}: cannot read: {exc}") from None
        return _doc(str(path), data, _media_type(path.name), st.st_mtime_ns // 1_000_000)


class FileIngester(_Rooted):
    """One file under ``root`` (a path relative to it, an absolute path or a file URL)."""

    name = "ingest/file"

    def ingest(self, ref: str) -> list[Doc]:
        path = self._resolve(ref)
        if not path.is_file():
            raise IngestError(f"{ref}: not a regular file (use TreeIngester for directories)")
        return [self._read(path)]


class TreeIngester(_Rooted):
    """Every text file of a directory tree under ``root``, in sorted path order.

    Files whose suffix is not in ``suffixes`` are left out, as are files that are not UTF-8
    (listed in :attr:`skipped` with the reason). A tree with no document fails.
    """

    name = "ingest/tree"

    def __init__(
        self,
        root: str | Path,
        suffixes: Iterable[str] = TEXT_SUFFIXES,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        super().__init__(root, max_bytes)
        self.suffixes = frozenset(suffixes)
        self.skipped: list[tuple[str, str]] = []

    def ingest(self, ref: str) -> list[Doc]:
        top = self._resolve(ref)
        if top.is_file():
            return [self._read(top)]
        docs: list[Doc] = []
        for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
            dirnames.sort()
            for fname in sorted(filenames):
                path = Path(dirpath) / fname
                if path.suffix.lower() not in self.suffixes:
                    continue
                try:
                    real = self._resolve(str(path))  # a symlink may point out of the root
                    docs.append(self._read(real))
                except (OutOfBounds, IngestError) as exc:
                    self.skipped.append((str(path), str(exc)))
        if not docs:
            raise IngestError(
                f"{ref}: no readable document under {top} (suffixes {sorted(self.suffixes)}; "
                f"{len(self.skipped)} skipped)"
            )
        return docs


# ---- HTTP(S) ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Bounds:
    """What a URL ingester will resolve: schemes, hosts (``host`` or ``host:port``) and path
    prefixes (whole segments: ``/docs`` admits ``/docs/a`` but not ``/docsx``)."""

    schemes: frozenset[str]
    hosts: frozenset[str]
    paths: tuple[str, ...] = ("/",)

    def check(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in self.schemes:
            raise OutOfBounds(f"{url}: scheme {scheme!r} is not in {sorted(self.schemes)}")
        if parts.username is not None or parts.password is not None:
            raise OutOfBounds(f"{url}: credentials in a URL are refused")
        host = (parts.hostname or "").lower()
        try:
            port = parts.port
        except ValueError:
            raise OutOfBounds(f"{url}: malformed port") from None
        named = {host} if port is None else {f"{host}:{port}"}
        if not named & self.hosts:
            raise OutOfBounds(f"{url}: host {host!r} (port {port}) is not in {sorted(self.hosts)}")
        raw = urllib.parse.unquote(parts.path) or "/"
        path = posixpath.normpath(raw)
        if raw.endswith("/") and path != "/":
            path += "/"
        for prefix in self.paths:
            base = prefix.rstrip("/")
            if not base or path == base or path.startswith(base + "/"):
                return
        raise OutOfBounds(f"{url}: path {path!r} is not under {list(self.paths)}")


class _BoundedRedirects(urllib.request.HTTPRedirectHandler):
    """Check a redirect target against the bounds before following it."""

    max_redirections = 5

    def __init__(self, bounds: Bounds) -> None:
        super().__init__()
        self.bounds = bounds

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        target = urllib.parse.urljoin(req.full_url, newurl)
        try:
            self.bounds.check(target)
        except OutOfBounds as exc:
            raise OutOfBounds(f"redirect {code} from {req.full_url} refused: {exc}") from None
        return super().redirect_request(req, fp, code, msg, headers, target)

    def http_error_302(
        self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str, headers: Any
    ) -> Any:
        # check before urllib's own scheme filter, so every escape reads as out of bounds
        location = headers.get("location") or headers.get("uri")
        if location:
            target = urllib.parse.urljoin(req.full_url, location)
            try:
                self.bounds.check(target)
            except OutOfBounds as exc:
                raise OutOfBounds(f"redirect {code} from {req.full_url} refused: {exc}") from None
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


class HTTPIngester:
    """GET one URL inside ``bounds``; redirects are followed only inside the bounds."""

    name = "ingest/http"

    def __init__(
        self,
        bounds: Bounds,
        timeout: float = 10.0,
        max_bytes: int = MAX_BYTES,
        proxies: Mapping[str, str] | None = None,
    ) -> None:
        bad = bounds.schemes - {"http", "https"}
        if bad:
            raise IngestError(f"the HTTP ingester serves http and https, not {sorted(bad)}")
        self.bounds = bounds
        self.timeout = timeout
        self.max_bytes = max_bytes
        self._opener = urllib.request.build_opener(
            urllib.request.ProxyHandler(dict(proxies or {})), _BoundedRedirects(bounds)
        )

    def ingest(self, ref: str) -> list[Doc]:
        self.bounds.check(ref)
        req = urllib.request.Request(ref, headers={"User-Agent": "hirmem-semantic/1"})
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                final = resp.geturl()
                self.bounds.check(final)
                data = resp.read(self.max_bytes + 1)
                headers = resp.headers
        except urllib.error.HTTPError as exc:
            raise IngestError(f"{ref}: HTTP {exc.code} {exc.reason}") from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, OutOfBounds):
                raise exc.reason from None
            raise IngestError(f"{ref}: cannot fetch: {exc.reason}") from None
        except OSError as exc:
            raise IngestError(f"{ref}: cannot fetch: {exc}") from None
        if len(data) > self.max_bytes:
            raise IngestError(f"{ref}: larger than {self.max_bytes} bytes")
        media = headers.get_content_type() if headers.get("Content-Type") else _media_type(ref)
        charset = headers.get_content_charset() or "utf-8"
        mtime = 0
        if headers.get("Last-Modified"):
            try:
                mtime = int(email.utils.parsedate_to_datetime(headers["Last-Modified"])
                            .timestamp() * 1000)  # fmt: skip
            except (TypeError, ValueError):
                mtime = 0
        text = _decode(data, final, charset)
        org = Origin.of_bytes(final, data, media, mtime)
        return [Doc(doc_id(ref, 0, org.sha256), ref, text, with_origin({}, org))]


# ---- memory -----------------------------------------------------------------------------------


class MemoryIngester:
    """Readers already in memory, by name: ``mem://name`` or ``name``."""

    name = "ingest/memory"

    def __init__(
        self,
        items: Mapping[str, str | bytes | IO[bytes]],
        media_type: str = "text/plain",
    ) -> None:
        self.items = dict(items)
        self.media_type = media_type

    def ingest(self, ref: str) -> list[Doc]:
        key = ref[len("mem://") :] if ref.startswith("mem://") else ref
        if key not in self.items:
            raise IngestError(f"{ref}: no in-memory reader named {key!r}")
        item = self.items[key]
        if isinstance(item, str):
            data = item.encode("utf-8")
        elif isinstance(item, bytes):
            data = item
        else:
            data = item.read()
        return [_doc(f"mem://{key}", data, self.media_type, 0)]


# ---- registry ---------------------------------------------------------------------------------


class Registry:
    """Ingesters by scheme; itself an :class:`Ingester` that dispatches on the reference."""

    name = "ingest/registry"

    def __init__(self) -> None:
        self._by_scheme: dict[str, Callable[[], Ingester]] = {}

    def register(self, scheme: str, make: Ingester | Callable[[], Ingester]) -> None:
        if isinstance(make, Ingester):
            held = make
            self._by_scheme[scheme.lower()] = lambda: held
        else:
            self._by_scheme[scheme.lower()] = make

    def schemes(self) -> list[str]:
        return sorted(self._by_scheme)

    def driver(self, ref: str) -> Ingester:
        parts = urllib.parse.urlsplit(ref)
        scheme = parts.scheme.lower() if len(parts.scheme) > 1 else "file"
        make = self._by_scheme.get(scheme)
        if make is not None:
            return make()
        if scheme in KNOWN_SCHEMES:
            raise NotBuilt(
                f"{ref}: scheme {scheme!r} is a known source ({KNOWN_SCHEMES[scheme]}) but "
                "this build has no ingester for it"
            )
        raise UnknownDriver(f"{ref}: no ingester knows the scheme {scheme!r}; registered: "
                            f"{self.schemes()}")  # fmt: skip

    def ingest(self, ref: str) -> list[Doc]:
        return self.driver(ref).ingest(ref)

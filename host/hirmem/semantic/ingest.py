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
- A URL path is checked as a server might read it: percent-decoded (until it no longer
  changes), with ``\\`` taken as a separator and ``;parameters`` dropped from each segment,
  so ``/docs/..;/secret`` and ``/docs/..%5csecret`` are outside ``/docs``.
- A driver that cannot read what it names fails (:class:`IngestError`); it never returns an
  empty document set instead.
- Reading is bounded in time, memory and kind: only regular files are read (a named pipe,
  a socket or a device is skipped with the reason, and never opened for a blocking read);
  a file is read up to ``max_bytes``; a tree up to ``max_total_bytes`` in all (the files
  past it are skipped with the reason); an HTTP fetch — connecting, every redirect, the
  headers and the body — ends at one total ``timeout``, however slowly a server drips.
- Every document records its origin (:func:`hirmem.semantic.values.with_origin`).
- The HTTP driver ignores proxy settings from the environment unless given ``proxies``.
"""

from __future__ import annotations

import email.utils
import functools
import http.client
import io
import mimetypes
import os
import posixpath
import socket
import ssl
import stat
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from hirmem.semantic.errors import IngestError, NotBuilt, OutOfBounds, UnknownDriver
from hirmem.semantic.stages import Ingester
from hirmem.semantic.values import Doc, Origin, doc_id, origin, with_origin

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
MAX_BYTES = 16 * 1024 * 1024  # one file or response
MAX_TOTAL_BYTES = 64 * 1024 * 1024  # one tree


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

    def _read(self, path: Path, limit: int | None = None) -> Doc:
        """A regular file of at most ``limit`` (else ``max_bytes``) bytes. It is opened
        without blocking and checked on the open descriptor, so a named pipe (or a file
        swapped for one) is refused rather than waited on."""
        cap = self.max_bytes if limit is None else min(limit, self.max_bytes)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise IngestError(f"{path}: cannot read: {exc}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise IngestError(f"{path}: not a regular file ({_kind(st.st_mode)}); only "
                                  "regular files are read")  # fmt: skip
            if st.st_size > self.max_bytes:
                raise IngestError(f"{path}: {st.st_size} bytes, the limit is {self.max_bytes}")
            if st.st_size > cap:
                raise IngestError(f"{path}: {st.st_size} bytes, more than the {cap} left of "
                                  "the total")  # fmt: skip
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = _read_upto(f, cap + 1, st.st_size + 1)
        except OSError as exc:
            raise IngestError(f"{path}: cannot read: {exc}") from None
        finally:
            os.close(fd)
        if len(data) > cap:  # it grew while being read
            raise IngestError(f"{path}: more than {cap} bytes, the limit")
        return _doc(str(path), data, _media_type(path.name), st.st_mtime_ns // 1_000_000)


def _read_upto(f: IO[bytes], limit: int, expect: int = 1 << 16) -> bytes:
    """At most ``limit`` bytes of ``f``, in pieces, so no buffer of ``limit`` bytes is made
    up front for a short stream (``read(n)`` allocates ``n``)."""
    parts: list[bytes] = []
    got = 0
    piece = max(1, min(expect, limit))
    while got < limit:
        b = f.read(min(piece, limit - got))
        if not b:
            break
        parts.append(b)
        got += len(b)
        piece = 1 << 16
    return b"".join(parts)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a directory")):  # fmt: skip
        if test(mode):
            return name
    return f"mode {stat.filemode(mode)}"


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

    Files whose suffix is not in ``suffixes`` are left out. Files that are not UTF-8, not
    regular (a named pipe, a socket, a device: whatever their suffix), larger than
    ``max_bytes`` or past ``max_total_bytes`` for the whole tree are listed in
    :attr:`skipped` with the reason. A tree with no document fails.
    """

    name = "ingest/tree"

    def __init__(
        self,
        root: str | Path,
        suffixes: Iterable[str] = TEXT_SUFFIXES,
        max_bytes: int = MAX_BYTES,
        max_total_bytes: int = MAX_TOTAL_BYTES,
    ) -> None:
        super().__init__(root, max_bytes)
        self.suffixes = frozenset(suffixes)
        self.max_total_bytes = max_total_bytes
        self.skipped: list[tuple[str, str]] = []

    def ingest(self, ref: str) -> list[Doc]:
        top = self._resolve(ref)
        if not top.is_dir():
            return [self._read(top, self.max_total_bytes)]
        docs: list[Doc] = []
        total = 0
        for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
            dirnames.sort()
            for fname in sorted(filenames):
                path = Path(dirpath) / fname
                try:
                    mode = path.lstat().st_mode
                except OSError as exc:
                    self.skipped.append((str(path), f"cannot read: {exc}"))
                    continue
                if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
                    self.skipped.append((str(path), f"not a regular file ({_kind(mode)}); "
                                                    "only regular files are read"))  # fmt: skip
                    continue
                if path.suffix.lower() not in self.suffixes:
                    continue
                left = self.max_total_bytes - total
                try:
                    real = self._resolve(str(path))  # a symlink may point out of the root
                    size = real.stat().st_size
                    if left < size <= self.max_bytes:
                        raise IngestError(
                            f"{real}: {size} bytes would pass the tree's total "
                            f"of {self.max_total_bytes} bytes ({total} read)"
                        )
                    doc = self._read(real, left)
                except (OutOfBounds, IngestError) as exc:
                    self.skipped.append((str(path), str(exc)))
                    continue
                except OSError as exc:
                    self.skipped.append((str(path), f"cannot read: {exc}"))
                    continue
                total += origin(doc).size
                docs.append(doc)
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
        for path in _server_readings(url, parts.path):
            if not any(_under(path, prefix) for prefix in self.paths):
                raise OutOfBounds(f"{url}: path {path!r} is not under {list(self.paths)}")


def _under(path: str, prefix: str) -> bool:
    base = prefix.rstrip("/")
    return not base or path == base or path.startswith(base + "/")


def _normal(raw: str) -> str:
    path = posixpath.normpath(raw or "/")
    if path.startswith("//"):  # POSIX keeps a leading "//"; a URL path means "/"
        path = "/" + path.lstrip("/")
    return path + "/" if raw.endswith("/") and path != "/" else path


def _server_readings(url: str, raw: str) -> list[str]:
    """The normalised paths a server might read ``raw`` as: percent-decoded until it no longer
    changes, then as written, with ``\\`` as a separator, and with every segment's
    ``;parameters`` dropped. A path that is in bounds must be in bounds in every reading."""
    path = raw
    for _ in range(4):
        decoded = urllib.parse.unquote(path)
        if decoded == path:
            break
        path = decoded
    else:
        raise OutOfBounds(f"{url}: the path is still percent-encoded after four decodings")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in path):
        raise OutOfBounds(f"{url}: the decoded path holds control characters")
    slashed = path.replace("\\", "/")
    no_params = "/".join(seg.split(";", 1)[0] for seg in slashed.split("/"))
    return list(dict.fromkeys(_normal(p) for p in (path, slashed, no_params)))


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


def _left(deadline: float) -> float:
    """Seconds left before ``deadline`` (monotonic); past it, the fetch is over."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the total deadline passed")
    return left


class _DeadlineReader(io.RawIOBase):
    """Reads of a socket, each allowed only the time left before the deadline."""

    def __init__(self, owner: _DeadlineSocket) -> None:
        super().__init__()
        self.owner = owner

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        sock = self.owner.sock
        sock.settimeout(_left(self.owner.deadline))
        return sock.recv_into(buf)

    def close(self) -> None:
        if not self.closed:
            super().close()
            self.owner.reader_closed()


class _DeadlineSocket:
    """A connection's socket whose every read ends by one deadline, so a server dripping a
    byte at a time cannot keep a fetch alive past it. The socket closes when the connection
    and every reader made from it are closed (as ``socket.makefile`` does)."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self._readers = 0
        self._closing = False

    def makefile(self, mode: str = "rb", *args: Any, **kwargs: Any) -> io.BufferedReader:
        self._readers += 1
        return io.BufferedReader(_DeadlineReader(self))

    def sendall(self, data: Any) -> None:
        self.sock.settimeout(_left(self.deadline))
        self.sock.sendall(data)

    def reader_closed(self) -> None:
        self._readers -= 1
        if self._closing and self._readers <= 0:
            self.sock.close()

    def close(self) -> None:
        self._closing = True
        if self._readers <= 0:
            self.sock.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


class _DeadlineHTTP(http.client.HTTPConnection):
    def __init__(self, host: str, *, deadline: float, **kwargs: Any) -> None:
        super().__init__(host, **kwargs)
        self.deadline = deadline

    def connect(self) -> None:
        self.timeout = _left(self.deadline)
        super().connect()
        self.sock = _DeadlineSocket(self.sock, self.deadline)


class _DeadlineHTTPS(http.client.HTTPSConnection):
    def __init__(self, host: str, *, deadline: float, **kwargs: Any) -> None:
        super().__init__(host, **kwargs)
        self.deadline = deadline

    def connect(self) -> None:
        self.timeout = _left(self.deadline)
        super().connect()  # TCP and the TLS handshake, each step within the time left
        self.sock = _DeadlineSocket(self.sock, self.deadline)


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: float) -> None:
        super().__init__()
        self.deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_DeadlineHTTP, deadline=self.deadline), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: float, context: ssl.SSLContext | None) -> None:
        super().__init__(context=context)
        self.deadline = deadline
        self.tls = context

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_DeadlineHTTPS, deadline=self.deadline), req,
                            context=self.tls)  # fmt: skip


class HTTPIngester:
    """GET one URL inside ``bounds``; redirects are followed only inside the bounds. The whole
    fetch — connection, redirects, headers, body — ends at ``timeout`` seconds in total."""

    name = "ingest/http"

    def __init__(
        self,
        bounds: Bounds,
        timeout: float = 10.0,
        max_bytes: int = MAX_BYTES,
        proxies: Mapping[str, str] | None = None,
        context: ssl.SSLContext | None = None,
    ) -> None:
        bad = bounds.schemes - {"http", "https"}
        if bad:
            raise IngestError(f"the HTTP ingester serves http and https, not {sorted(bad)}")
        self.bounds = bounds
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.proxies = dict(proxies or {})
        self.context = context  # TLS settings (a private CA); None: the system's defaults

    def _opener(self, deadline: float) -> urllib.request.OpenerDirector:
        return urllib.request.build_opener(
            urllib.request.ProxyHandler(self.proxies), _BoundedRedirects(self.bounds),
            _HTTPHandler(deadline), _HTTPSHandler(deadline, self.context),
        )  # fmt: skip

    def ingest(self, ref: str) -> list[Doc]:
        self.bounds.check(ref)
        req = urllib.request.Request(ref, headers={"User-Agent": "hirmem-semantic/1"})
        late = f"{ref}: not fetched within the total deadline of {self.timeout} s"
        deadline = time.monotonic() + self.timeout
        try:
            with self._opener(deadline).open(req, timeout=self.timeout) as resp:
                final = resp.geturl()
                self.bounds.check(final)
                data = _read_upto(resp, self.max_bytes + 1)
                headers = resp.headers
        except urllib.error.HTTPError as exc:
            raise IngestError(f"{ref}: HTTP {exc.code} {exc.reason}") from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, OutOfBounds):
                raise exc.reason from None
            if isinstance(exc.reason, TimeoutError):
                raise IngestError(late) from None
            raise IngestError(f"{ref}: cannot fetch: {exc.reason}") from None
        except TimeoutError:
            raise IngestError(late) from None
        except (OSError, http.client.HTTPException) as exc:
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
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self.items = dict(items)
        self.media_type = media_type
        self.max_bytes = max_bytes

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
            data = item.read(self.max_bytes + 1)
        if len(data) > self.max_bytes:
            raise IngestError(f"{ref}: more than {self.max_bytes} bytes, the limit")
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

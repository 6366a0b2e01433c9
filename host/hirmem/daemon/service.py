"""``hirmem daemon``: every configured device served at once, packs into the store exactly once.

One :class:`DeviceWorker` thread per device line runs a :class:`~hirmem.link.line.Link`
(the sans-IO :class:`~hirmem.link.session.Session` over a pyserial transport) and reopens
the line with exponential backoff when it drops, the device is unplugged or resets.
The session keeps its state across reconnects, so requests wait for the next
session. Device packs go through :class:`~hirmem.daemon.intake.StoreIntake`: verified and
committed before the PACK_RESULT leaves.

A housekeeping thread, once per ``save_every``: saves each worker's counters and
session state to the store (``hirmem status`` reads them from another process), asks
each device for STATUS every ``status_every`` seconds (its ring counters: evictions,
refusals), and pushes the newest knowledge version to every open session whose
device does not hold it yet (``hirmem push`` writes versions into the store; the
daemon notices within a second), retrying until the device answers.

SIGTERM or SIGINT stops it cleanly: links stop within 50 ms, lines close, the last
counters are saved, the store is closed.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from hirmem.daemon.config import DaemonConfig, DeviceConfig
from hirmem.daemon.intake import StoreIntake
from hirmem.daemon.store import Store
from hirmem.link.line import Link
from hirmem.link.session import (
    Counters,
    DeviceReset,
    ErrorReceived,
    IntakeFailed,
    KnowledgeDone,
    LogLine,
    PackReceived,
    PackRefused,
    RequestFailed,
    Session,
    SessionConfig,
    SessionError,
    SessionLost,
    SessionOpened,
    StatusReport,
)
from hirmem.link.session import Event as SessionEvent
from hirmem.link.transport import SerialTransport, TransportClosed, TransportError
from hirmem.protocol.keys import SigningKey
from hirmem.protocol.messages import PackStatus, Status
from hirmem.protocol.packs import KnowledgeItem, Pack, PackKind, sign_pack
from hirmem.protocol.records import GENESIS

log = logging.getLogger("hirmem.daemon")

# STATUS fields the device reports (SPEC §5.10), kept as device.<name> counters.
DEVICE_FIELDS = tuple(f.name for f in fields(Status))


def flatten_counters(counters: Counters) -> dict[str, int]:
    """Counters as flat names: ``frames_bad.crc``, ``packs_refused.rollback``, …"""
    flat: dict[str, int] = {}
    for f in fields(counters):
        value = getattr(counters, f.name)
        if isinstance(value, dict):
            for key, n in value.items():
                flat[f"{f.name}.{key}"] = int(n)
        else:
            flat[f.name] = int(value)
    return flat


def sign_knowledge(
    store: Store, key: SigningKey, host_id: bytes, items: Sequence[KnowledgeItem], created: int
) -> Pack:
    """Sign the next knowledge version (seq = latest + 1, chained) and keep it in the store."""
    latest = store.knowledge()
    seq = 1 if latest is None else latest.seq + 1
    prev = GENESIS if latest is None else latest.hash
    pack = sign_pack(key, PackKind.KNOWLEDGE, host_id, seq, prev, created, list(items))
    store.add_knowledge(pack)
    return pack


class DeviceWorker:
    """One device line: its session, its link, reconnects, and what it reports."""

    def __init__(self, daemon: Daemon, config: DeviceConfig) -> None:
        self.daemon = daemon
        self.config = config
        cfg = daemon.config
        self.intake = StoreIntake(daemon.store)
        self.session = Session(
            SessionConfig(cfg.host_id, max_frame=cfg.max_frame, window=cfg.window),
            self.intake,
        )
        self.link: Link | None = None
        self.state = "starting"
        self.device_id: bytes | None = None
        self.device_status: dict[str, int] = {}
        self.reconnects = 0
        self.last_status_request = 0.0
        self.knowledge_pending: tuple[int, int] | None = None  # (token, seq)
        self.knowledge_given_up: set[int] = set()
        # the knowledge head the device reported in this session's STATUS (None: none
        # yet), and the versions pushed again this session because it had lost them
        self.reported_knowledge: int | None = None
        self.knowledge_repushed: set[int] = set()
        self._thread = threading.Thread(
            target=self._run, name=f"device {config.label}", daemon=True
        )

    # ---- the line ----------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        link = self.link
        if link is not None:
            link.stop()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        cfg = self.daemon.config
        delay = cfg.reconnect_min
        while not self.daemon.stopping.is_set():
            transport = SerialTransport(self.config.url, baudrate=self.config.baudrate)
            link = Link(transport, self.session, on_event=self._on_event)
            self.link = link
            self._set_state("connecting")
            opened_before = self.session.counters.sessions_opened
            try:
                if self.daemon.stopping.is_set():
                    break
                link.run()
            except TransportClosed as exc:
                log.warning("line closed", extra=self._ctx(detail=str(exc)))
            except TransportError as exc:
                log.warning("cannot open the line", extra=self._ctx(detail=str(exc)))
            except Exception:  # a bug must not take the other devices down
                log.exception("device worker failed", extra=self._ctx())
            finally:
                self.link = None
            if self.daemon.stopping.is_set():
                break
            if self.session.counters.sessions_opened > opened_before:
                delay = cfg.reconnect_min  # the line worked: start the backoff again
            self.reconnects += 1
            self._set_state(f"reconnecting in {delay:.2f} s")
            self.daemon.stopping.wait(delay)
            delay = min(delay * 2, cfg.reconnect_max)
        self._set_state("stopped")

    def _set_state(self, state: str) -> None:
        self.state = state
        if self.device_id is not None:
            self.daemon.store.set_session(self.device_id, self.config.url, state)

    def _ctx(self, **more: Any) -> dict[str, Any]:
        ctx: dict[str, Any] = {
            "device": self.device_id.hex() if self.device_id else None,
            "url": self.config.url,
        }
        ctx.update(more)
        return {"ctx": ctx}

    # ---- events (on the link's thread) ----------------------------------------------------

    def _on_event(self, event: SessionEvent) -> None:
        store = self.daemon.store
        if isinstance(event, SessionOpened):
            dev = event.device
            self.device_id = dev.device_id
            store.seen(dev.device_id, dev.board, dev.firmware, dev.boot)
            self._set_state("open")
            self.knowledge_pending = None
            self.reported_knowledge = None
            self.knowledge_repushed = set()
            log.info(
                "session open",
                extra=self._ctx(
                    board=dev.board,
                    boot=dev.boot,
                    max_frame=event.max_frame,
                    pack_seq=event.pack_seq,
                ),
            )
        elif isinstance(event, SessionLost):
            self._set_state(f"lost: {event.reason}")
            log.warning("session lost", extra=self._ctx(reason=event.reason))
        elif isinstance(event, DeviceReset):
            log.warning(
                "device reset", extra=self._ctx(old_boot=event.old_boot, new_boot=event.new_boot)
            )
        elif isinstance(event, PackReceived):
            log.info(
                "pack stored" if not event.duplicate else "pack already stored",
                extra=self._ctx(seq=event.seq, pack=event.pack_id.hex()),
            )
        elif isinstance(event, PackRefused):
            d = event.disposition
            log.warning(
                "pack refused",
                extra=self._ctx(
                    status=d.status.name.lower(), reason=d.reason.name.lower(), detail=d.detail
                ),
            )
        elif isinstance(event, StatusReport):
            st = event.status
            self.device_status = {name: int(getattr(st, name)) for name in DEVICE_FIELDS}
            self.reported_knowledge = int(st.knowledge_seq)
        elif isinstance(event, KnowledgeDone):
            self._knowledge_done(event)
        elif isinstance(event, LogLine):
            log.info("device log", extra=self._ctx(level=int(event.level), text=event.text))
        elif isinstance(event, ErrorReceived):
            log.warning(
                "device error", extra=self._ctx(code=event.code, ref=event.ref, detail=event.detail)
            )
        elif isinstance(event, RequestFailed | IntakeFailed):
            log.warning("request failed", extra=self._ctx(detail=str(event)))

    def _knowledge_done(self, event: KnowledgeDone) -> None:
        pending = self.knowledge_pending
        if pending is None or pending[0] != event.token:
            return
        self.knowledge_pending = None
        if self.device_id is None:
            return
        if event.status is None:  # not delivered: the next session tries again
            log.warning(
                "knowledge not delivered", extra=self._ctx(seq=event.seq, detail=event.detail)
            )
            return
        status = PackStatus(event.status).name.lower()
        self.daemon.store.set_device_knowledge(
            self.device_id, event.seq, status, int(event.reason), event.held_seq or 0
        )
        if event.held_seq is not None:  # newer than any STATUS answered before the push
            self.reported_knowledge = max(self.reported_knowledge or 0, event.held_seq)
        log.info(
            "knowledge answered",
            extra=self._ctx(seq=event.seq, status=status, reason=int(event.reason)),
        )

    # ---- housekeeping (on the daemon's thread) -----------------------------------------

    def housekeeping(self, now: float) -> None:
        link = self.link
        if link is None or not self.session.is_open or self.device_id is None:
            return
        cfg = self.daemon.config
        if cfg.status_every and now - self.last_status_request >= cfg.status_every:
            self.last_status_request = now
            try:
                link.call(lambda s: s.request_status())
            except SessionError as exc:
                log.warning("status request refused", extra=self._ctx(detail=str(exc)))
        self._maybe_push(link)

    def _maybe_push(self, link: Link) -> None:
        assert self.device_id is not None
        latest = self.daemon.latest_knowledge()
        if latest is None or self.knowledge_pending is not None:
            return
        seq, raw = latest
        if seq in self.knowledge_given_up:
            return
        answered = {
            s: status
            for s, status, _, _ in self.daemon.store.device_knowledge(self.device_id)
            if status != "pending"
        }
        if seq in answered:
            # the device's own word wins over the store's memory of the push: one that
            # held this version and now reports less lost it (a power cycle without
            # non-volatile state) and gets it again, once per session
            held = self.reported_knowledge
            lost = answered[seq] in ("accepted", "duplicate") and held is not None and held < seq
            if not lost or seq in self.knowledge_repushed:
                return
            self.knowledge_repushed.add(seq)
            log.warning("device lost knowledge", extra=self._ctx(seq=seq, held=held))
        try:
            token = link.call(lambda s: s.push_knowledge(raw))
        except SessionError as exc:
            self.knowledge_given_up.add(seq)
            self.daemon.store.set_device_knowledge(self.device_id, seq, "not-sent", 0, 0)
            log.warning("knowledge not pushed", extra=self._ctx(seq=seq, detail=str(exc)))
            return
        self.knowledge_pending = (token, seq)
        self.daemon.store.set_device_knowledge(self.device_id, seq, "pending")
        log.info("knowledge pushed", extra=self._ctx(seq=seq))

    def counters(self) -> dict[str, int]:
        flat = flatten_counters(self.session.counters.snapshot())
        flat.update({f"device.{k}": v for k, v in self.device_status.items()})
        flat["reconnects"] = self.reconnects
        flat["record_conflicts"] = self.intake.record_conflicts
        return flat

    def save(self) -> None:
        if self.device_id is not None:
            self.daemon.store.save_counters(self.device_id, self.counters())


class Daemon:
    """The whole daemon: store, workers, housekeeping, metrics. :meth:`run` until signalled."""

    def __init__(self, config: DaemonConfig, *, store: Store | None = None) -> None:
        self.config = config
        self.store = store if store is not None else Store(config.database)
        self.stopping = threading.Event()
        self.workers = [DeviceWorker(self, dev) for dev in config.devices]
        self._house = threading.Thread(target=self._housekeeping, name="housekeeping", daemon=True)
        self._metrics: ThreadingHTTPServer | None = None
        self._knowledge_cache: tuple[int, bytes] | None = None
        self._started = False

    def latest_knowledge(self) -> tuple[int, bytes] | None:
        head = self.store.knowledge_head()
        if head is None:
            return None
        if self._knowledge_cache is None or self._knowledge_cache[0] != head.seq:
            row = self.store.knowledge(head.seq)
            if row is None:
                return None
            self._knowledge_cache = (row.seq, row.raw)
        return self._knowledge_cache

    def start(self) -> None:
        if self.config.metrics is not None:
            self._metrics = serve_metrics(self, *self.config.metrics)
        for worker in self.workers:
            worker.start()
        self._house.start()
        self._started = True
        log.info(
            "daemon started",
            extra={"ctx": {"devices": len(self.workers), "database": str(self.config.database)}},
        )

    def stop(self) -> None:
        if not self._started:
            self.store.close()
            return
        self.stopping.set()
        for worker in self.workers:
            worker.stop()
        for worker in self.workers:
            worker.join(5.0)
        self._house.join(5.0)
        for worker in self.workers:
            worker.save()
        if self._metrics is not None:
            self._metrics.shutdown()
            self._metrics.server_close()
        self.store.close()
        self._started = False
        log.info("daemon stopped")

    def run(self, *, until: Callable[[], bool] | None = None) -> None:
        """Start, serve until SIGTERM/SIGINT (or ``until()`` is true), stop."""
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

        def on_signal(signum: int, frame: object) -> None:
            del frame
            log.info("signal received", extra={"ctx": {"signal": signal.Signals(signum).name}})
            self.stopping.set()

        for sig in previous:
            signal.signal(sig, on_signal)
        try:
            self.start()
            while not self.stopping.wait(0.1):
                if until is not None and until():
                    break
        finally:
            self.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _housekeeping(self) -> None:
        while not self.stopping.wait(self.config.save_every):
            now = time.monotonic()
            for worker in self.workers:
                try:
                    worker.housekeeping(now)
                    worker.save()
                except Exception:
                    log.exception("housekeeping failed", extra=worker._ctx())


# ---- Prometheus text endpoint ----------------------------------------------------------


def render_metrics(daemon: Daemon) -> str:
    """Every worker's counters in the Prometheus text format (one family per counter)."""
    families: dict[str, list[str]] = {}
    for worker in daemon.workers:
        device = worker.device_id.hex() if worker.device_id else ""
        labels = f'device="{device}",url="{worker.config.url}"'
        for name, value in sorted(worker.counters().items()):
            base, _, kind = name.partition(".")
            metric = f"hirmem_{base}"
            if base == "device":
                metric, kind = f"hirmem_device_{kind}", ""
            extra = f',kind="{kind}"' if kind else ""
            families.setdefault(metric, []).append(f"{metric}{{{labels}{extra}}} {value}")
        families.setdefault("hirmem_session_open", []).append(
            f"hirmem_session_open{{{labels}}} {int(worker.session.is_open)}"
        )
    lines: list[str] = []
    for metric in sorted(families):
        gauge = metric.startswith("hirmem_device_") or metric == "hirmem_session_open"
        lines.append(f"# TYPE {metric} {'gauge' if gauge else 'counter'}")
        lines.extend(families[metric])
    return "\n".join(lines) + "\n"


def serve_metrics(daemon: Daemon, address: str, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404, "only /metrics is served")
                return
            body = render_metrics(daemon).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            del format, args  # requests are not worth a log line each

    server = ThreadingHTTPServer((address, port), Handler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


# ---- structured logs -------------------------------------------------------------------


class StructuredFormatter(logging.Formatter):
    """One line per record: ``time level message key=value …`` or one JSON object."""

    def __init__(self, as_json: bool) -> None:
        super().__init__()
        self.as_json = as_json

    def format(self, record: logging.LogRecord) -> str:
        ctx: dict[str, Any] = dict(getattr(record, "ctx", {}) or {})
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        ts += f".{int(record.msecs):03d}Z"
        if self.as_json:
            doc = {"ts": ts, "level": record.levelname.lower(), "event": record.getMessage()}
            doc.update(ctx)
            if record.exc_info:
                doc["exc"] = self.formatException(record.exc_info)
            return json.dumps(doc, default=str)
        pairs = " ".join(
            f"{k}={json.dumps(v) if isinstance(v, str) and ' ' in v else v}"
            for k, v in ctx.items()
            if v is not None
        )
        line = f"{ts} {record.levelname.lower():<7} {record.getMessage()}"
        if pairs:
            line += " " + pairs
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup_logging(fmt: str = "text", level: int = logging.INFO) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(StructuredFormatter(fmt == "json"))
    root = logging.getLogger("hirmem")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False

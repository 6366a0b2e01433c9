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

Background jobs given by the caller (:class:`Background`: the memory keeper that
``hirmem daemon`` builds, which follows the intake into the memory engine and runs its
decay scheduler) each get a thread that calls ``tick()`` every ``interval`` seconds;
a failing tick is logged and counted, and the next one retries. At stop each job's
thread is joined and its ``close()`` runs (the memory keeper signs an audit checkpoint).
With a ``[fleet]`` in the configuration the daemon adds one of its own: the outbox
(:mod:`hirmem.daemon.outbox`), which forwards every accepted pack to the fleet node.

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
from typing import TYPE_CHECKING, Any, Protocol

from hirmem.daemon.config import DaemonConfig, DeviceConfig
from hirmem.daemon.endpoint import Endpoint
from hirmem.daemon.intake import StoreIntake
from hirmem.daemon.metrics import daemon_registry, render_metrics
from hirmem.daemon.store import DeviceLimits, Store
from hirmem.link.line import Link
from hirmem.link.session import (
    Counters,
    DeviceInfo,
    DeviceReset,
    ErrorReceived,
    IntakeFailed,
    KnowledgeDone,
    LogLine,
    PackReceived,
    PackRefused,
    ProofRefused,
    RequestFailed,
    Session,
    SessionConfig,
    SessionError,
    SessionLost,
    SessionOpened,
    StatusReport,
    capacity_problem,
    knowledge_size,
    request_problem,
)
from hirmem.link.session import Event as SessionEvent
from hirmem.link.transport import (
    TransportClosed,
    TransportError,
    TransportStalled,
    make_transport,
)
from hirmem.protocol.clock import now_ms
from hirmem.protocol.keys import SigningKey
from hirmem.protocol.messages import (
    KnowledgePush,
    LogLevel,
    PackStatus,
    Status,
    encode_message,
)
from hirmem.protocol.packs import KnowledgeItem, Pack, PackKind, Reason, sign_pack
from hirmem.protocol.records import GENESIS

if TYPE_CHECKING:
    from hirmem.daemon.outbox import Outbox

log = logging.getLogger("hirmem.daemon")

__all__ = ["Daemon", "DeviceWorker", "render_metrics", "sign_knowledge"]

# STATUS fields the device reports (SPEC §5.10), kept as device.<name> counters.
DEVICE_FIELDS = tuple(f.name for f in fields(Status))
# Session counters a debug "line traffic" summary carries (their change since the last).
TRAFFIC_FIELDS = frozenset(
    {"bytes_in", "bytes_out", "frames_good", "frames_bad", "frames_out", "messages_in",
     "messages_out", "refused_in", "retransmissions", "timeouts", "packs_accepted",
     "packs_duplicate", "packs_deferred", "packs_refused"}
)  # fmt: skip


# Device LOG lines: at most LOG_BURST at once, LOG_RATE per second after that; the
# rest are counted (device_logs_dropped) and the next line logged says how many.
LOG_BURST = 20
LOG_RATE = 5.0
TRUST_HINT_EVERY_S = 300.0  # how often an untrusted device's hint (`device add`) repeats
# A line that sends more than NOISE_PER_S frames the host must refuse or cannot read
# (damaged, malformed, of a host's type) per second is not read for a while: its bytes
# wait in the kernel's buffers, so a flooding peer costs little CPU. The pause starts
# at NOISE_PAUSE_S and doubles while the line stays noisy, up to NOISE_PAUSE_MAX_S.
# The line's own thread judges it after every turn of its loop (a turn parses at
# most hirmem.link.line.FEED_SLICE bytes), over the last NOISE_LOOK_S, and at once
# when a flood's worth (more than NOISE_PER_S) came in less: a peer that writes as
# fast as loopback allows is paused after one slice, not after a second of parsing
# that holds the interpreter's lock the honest lines need.
NOISE_PER_S = 200
NOISE_PAUSE_S = 1.0
NOISE_PAUSE_MAX_S = 30.0
NOISE_LOOK_S = 1.0
# Debug level: a line's traffic (frames, bytes, messages, saves) is summed up at most
# once per TRAFFIC_LOG_EVERY_S, not logged frame by frame.
TRAFFIC_LOG_EVERY_S = 5.0


class RateLimit:
    """A token bucket: :meth:`take` is true while the rate and burst allow."""

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate, self.burst, self._clock = rate, burst, clock
        self._tokens = float(burst)
        self._at = clock()

    def take(self) -> bool:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True


_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def sanitise_device_text(text: str) -> str:
    """Device text made safe for one log line: every character that is not printable
    (control characters, line and paragraph separators, non-breaking and other spaces
    but the ASCII one, format characters, terminal escapes) and the backslash are
    written as escapes, so a device can neither forge a daemon line nor drive a terminal."""
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch == " " or ch.isprintable():
            out.append(ch)
        elif ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        else:
            code = ord(ch)
            if code < 0x100:
                out.append(f"\\x{code:02x}")
            elif code < 0x10000:
                out.append(f"\\u{code:04x}")
            else:
                out.append(f"\\U{code:08x}")
    return "".join(out)


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
    store: Store,
    key: SigningKey,
    host_id: bytes,
    items: Sequence[KnowledgeItem],
    created: int,
    *,
    check: Callable[[Pack], None] | None = None,
) -> Pack:
    """Sign the next knowledge version (seq = latest + 1, chained) and keep it in the store.

    ``check(pack)`` runs before the version is kept; an exception from it keeps nothing.
    """
    latest = store.knowledge()
    seq = 1 if latest is None else latest.seq + 1
    prev = GENESIS if latest is None else latest.hash
    pack = sign_pack(key, PackKind.KNOWLEDGE, host_id, seq, prev, created, list(items))
    if check is not None:
        check(pack)
    store.add_knowledge(pack)
    return pack


def undeliverable(store: Store, pack: Pack, max_frame: int) -> dict[bytes, str]:
    """Registered devices whose last HELLO says they could never take knowledge ``pack``
    (over frames of at most ``max_frame``), with why. Devices not seen yet are left out."""
    inner = len(encode_message(KnowledgePush(pack.encoded), inner=True))
    problems = {}
    for row in store.devices():
        limits = store.device_limits(row.device_id)
        if limits is None:
            continue
        device = DeviceInfo(row.device_id, row.board, row.firmware, row.boot,
                            limits.capabilities, limits.max_frame, limits.max_message, 1,
                            row.kid, limits.host_kid, limits.knowledge_facts,
                            limits.knowledge_text)  # fmt: skip
        frame = min(max_frame, limits.max_frame)
        problem = request_problem(device, "knowledge", pack.kid, inner, frame)
        problem = problem or capacity_problem(device, knowledge_size(pack))
        if problem:
            problems[row.device_id] = problem
    return problems


class DeviceWorker:
    """One device line: its session, its link, reconnects, and what it reports.

    Nothing ends the worker but the daemon's stop: a line that cannot be opened or
    drops, a store that cannot write (a full disk), a bug in an event handler — each
    is logged, counted, shown in :attr:`state`, and followed by a reconnect with
    backoff. The store is written at best effort from here; what matters for
    exactly-once (the intake) answers *deferred* when the store fails, so the device
    keeps the pack and offers it again.
    """

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
        self.phase = "starting"  # one of metrics.LINE_PHASES
        self.state = "starting"  # the phase with its detail, as saved and shown
        self.last_heard: float | None = None  # Unix time of the last good frame seen
        self._state_saved = True  # False: the store missed the last state change
        self.device_id: bytes | None = None  # the device proven on this line (SPEC §6.5)
        self.claimed_id: bytes | None = None  # the id of an unregistered device on the line
        self.device_status: dict[str, int] = {}
        self.reconnects = 0
        self._stalled = False  # the line last ended at a write deadline
        self._noise_at: tuple[int, float] | None = None  # (noise, when) at the last look
        self._traffic_at: tuple[dict[str, int], float] | None = None  # at the last summary
        self._saves = 0  # counter saves since the last traffic summary
        self.line_pauses = 0
        self._pause_s = NOISE_PAUSE_S  # the next pause of a noisy line
        self._paused_until = 0.0
        self._proof_refused_at = -NOISE_PAUSE_MAX_S * 2  # when a PROOF was last refused
        self.store_errors = 0
        self.worker_errors = 0
        self._frames_saved = 0  # frames_good at the last counter save
        self._frame_seen_at: int | None = None  # when that count was seen to grow
        self._frames_heard = 0  # frames_good when last_heard was last moved
        self.log_limit = RateLimit(LOG_RATE, LOG_BURST)
        self.refusal_limit = RateLimit(LOG_RATE, LOG_BURST)  # "pack refused" log lines
        self._clock: Callable[[], float] = time.monotonic
        self._next_trust_hint = 0.0
        self.logs_dropped = 0
        self._logs_dropped_unsaid = 0
        self.last_status_request = 0.0
        self.knowledge_pending: dict[int, int] = {}  # token -> seq, pushed and unanswered
        self.knowledge_posted: int | None = None  # a push handed to the link, not yet run
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

    @property
    def line_device(self) -> bytes | None:
        """The device id this line's session is under, proven or (unregistered) claimed:
        for labels and logs; only :attr:`device_id` is recorded in the store."""
        return self.device_id or self.claimed_id

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        cfg = self.daemon.config
        delay = cfg.reconnect_min
        while not self.daemon.stopping.is_set():
            opened_before = self.session.counters.sessions_opened
            try:
                self._serve_once()
            except Exception:  # a bug must not take this device, or the others, down
                self.worker_errors += 1
                log.exception("device worker failed", extra=self._ctx())
            if self.daemon.stopping.is_set():
                break
            opened = self.session.counters.sessions_opened > opened_before
            if opened and not self._stalled:
                delay = cfg.reconnect_min  # the line worked: start the backoff again
            self.reconnects += 1
            self._set_state("reconnecting", f"reconnecting in {delay:.2f} s")
            self.daemon.stopping.wait(delay)
            delay = min(delay * 2, cfg.reconnect_max)
        self._set_state("stopped")

    def _serve_once(self) -> None:
        """Open the line and serve it until it drops or the daemon stops."""
        transport = make_transport(
            self.config.url,
            baudrate=self.config.baudrate,
            write_timeout_s=self.daemon.config.write_timeout,
        )
        link = Link(
            transport,
            self.session,
            on_event=self._on_event,
            after_step=lambda: self._quieten(self._clock()),
        )
        paused_s = self._paused_until - time.monotonic()
        if paused_s > 0:  # a pause outlives the line it was given to
            link.pause_reading(paused_s)
        self.link = link
        self._stalled = False
        self._set_state("connecting")
        try:
            if self.daemon.stopping.is_set():
                return
            link.run()
        except TransportStalled as exc:
            # a peer that stops reading may do it again at once: the backoff keeps growing
            self._stalled = True
            log.warning("line stalled", extra=self._ctx(detail=str(exc)))
        except TransportClosed as exc:
            log.warning("line closed", extra=self._ctx(detail=str(exc)))
        except TransportError as exc:
            log.warning("cannot open the line", extra=self._ctx(detail=str(exc)))
        finally:
            self.link = None
            transport.close()

    def _store_write(self, what: str, write: Callable[[], object]) -> bool:
        """Run one store write; a failure is counted and logged, never raised."""
        try:
            write()
        except Exception as exc:  # sqlite3.Error, StoreError, OSError: all the same here
            self.store_errors += 1
            log.warning("store write failed", extra=self._ctx(write=what, detail=f"{exc}"))
            return False
        if what == "counters":
            self._saves += 1  # once a second per line: summed up in "line traffic"
        else:
            log.debug("store committed", extra=self._ctx(write=what))
        return True

    def _set_state(self, phase: str, state: str | None = None) -> None:
        state = phase if state is None else state
        if state != self.state:
            log.debug("line state", extra=self._ctx(state=state, was=self.state))
        self.phase = phase
        self.state = state
        self._state_saved = self._save_state()

    def _save_state(self) -> bool:
        device_id = self.device_id
        if device_id is None:
            return True
        return self._store_write(
            "session state",
            lambda: self.daemon.store.set_session(
                device_id, self.config.url, self.state, self.config.name
            ),
        )

    def _ctx(self, **more: Any) -> dict[str, Any]:
        shown = self.line_device
        ctx: dict[str, Any] = {
            "device": shown.hex() if shown else None,
            "name": self.config.name or None,
            "url": self.config.url,
        }
        ctx.update(more)
        return {"ctx": ctx}

    # ---- events (on the link's thread) ----------------------------------------------------

    def _on_event(self, event: SessionEvent) -> None:
        store = self.daemon.store
        if isinstance(event, SessionOpened) and not event.proven:
            # no key is registered for this id: the session only refuses its packs
            # (recorded as refusals); nothing else of the line is kept under that id
            self.device_id = None
            self.claimed_id = event.device.device_id
            log.warning("session open, device not registered", extra=self._ctx())
        elif isinstance(event, SessionOpened):
            dev = event.device
            self.device_id = dev.device_id
            self.claimed_id = None
            self.last_heard = time.time()
            limits = DeviceLimits(dev.capabilities, dev.max_frame, dev.max_message, dev.host_kid,
                                  dev.knowledge_facts, dev.knowledge_text)  # fmt: skip
            self._store_write(
                "device seen",
                lambda: store.seen(dev.device_id, dev.board, dev.firmware, dev.boot, limits),
            )
            self._set_state("open")
            self.knowledge_posted = None  # a post to the last link may never have run
            self.knowledge_pending.clear()  # a new session: the old one's answers never come
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
        elif isinstance(event, ProofRefused):
            self._proof_refused(event)
        elif isinstance(event, SessionLost):
            self._set_state("lost", f"lost: {event.reason}")
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
            self._pack_refused(event)
        elif isinstance(event, StatusReport):
            st = event.status
            self.device_status = {name: int(getattr(st, name)) for name in DEVICE_FIELDS}
            self.reported_knowledge = int(st.knowledge_seq)
            log.debug("status report", extra=self._ctx(**self.device_status))
        elif isinstance(event, KnowledgeDone):
            self._knowledge_done(event)
        elif isinstance(event, LogLine):
            self._device_log(event)
        elif isinstance(event, ErrorReceived):
            log.warning(
                "device error", extra=self._ctx(code=event.code, ref=event.ref, detail=event.detail)
            )
        elif isinstance(event, RequestFailed | IntakeFailed):
            log.warning("request failed", extra=self._ctx(detail=str(event)))

    def _proof_refused(self, event: ProofRefused) -> None:
        """A line whose device failed its PROOF: nothing was recorded of it but the
        refusal (the intake did that); the line is not read for a while, longer each
        time, as a flooding line is not (see NOISE_PAUSE_S)."""
        link = self.link
        if link is not None:
            self.line_pauses += 1
            link.pause_reading(self._pause_s)
            self._paused_until = self._clock() + self._pause_s
        self._proof_refused_at = self._clock()
        if self.refusal_limit.take():
            log.warning(
                "session proof refused",
                extra=self._ctx(claimed=event.device_id.hex(), reason=event.reason,
                                detail=event.detail, pause_s=self._pause_s),
            )  # fmt: skip
        self._pause_s = min(self._pause_s * 2, NOISE_PAUSE_MAX_S)

    def _pack_refused(self, event: PackRefused) -> None:
        """Log a refusal (rate-limited, the rest counted in the session's counters); for a
        device whose key is not trusted, say once in a while how to trust it."""
        d = event.disposition
        if self.refusal_limit.take():
            log.warning(
                "pack refused",
                extra=self._ctx(
                    status=d.status.name.lower(), reason=d.reason.name.lower(), detail=d.detail
                ),
            )
        now = self._clock()
        if d.reason == Reason.UNKNOWN_KEY and now >= self._next_trust_hint:
            self._next_trust_hint = now + TRUST_HINT_EVERY_S
            device = event.device_id.hex()
            log.warning(
                "device not trusted",
                extra=self._ctx(
                    hint=f"if device {device} is yours, trust its key: hirmem device add "
                    f"--identity <its .pub.json> (its packs are refused until then)"
                ),
            )

    def _device_log(self, event: LogLine) -> None:
        if not self.log_limit.take():
            self.logs_dropped += 1
            self._logs_dropped_unsaid += 1
            return
        try:
            level = LogLevel(event.level).name.lower()
        except ValueError:
            level = str(int(event.level))
        more: dict[str, Any] = {"level": level, "text": sanitise_device_text(event.text)}
        if self._logs_dropped_unsaid:
            more["dropped_before"] = self._logs_dropped_unsaid
            self._logs_dropped_unsaid = 0
        log.info("device log", extra=self._ctx(**more))

    def _knowledge_done(self, event: KnowledgeDone) -> None:
        if self.knowledge_pending.pop(event.token, None) is None or self.device_id is None:
            return
        device_id = self.device_id
        if event.status is None:
            # Not delivered, and the session will not try again (the device cannot take
            # it: no KNOWLEDGE capability, another host key, too large, more facts than
            # it says it keeps; or a newer version superseded it). Recorded, so the next
            # version is not held up; the device's stated limits make it *refused*.
            self.knowledge_given_up.add(event.seq)
            status = "refused" if event.reason == Reason.STORAGE else "not-sent"
            self._store_write(
                "device knowledge",
                lambda: self.daemon.store.set_device_knowledge(
                    device_id, event.seq, status, int(event.reason)
                ),
            )
            log.warning(
                "knowledge not delivered", extra=self._ctx(seq=event.seq, detail=event.detail)
            )
            return
        status = PackStatus(event.status).name.lower()
        self._store_write(
            "device knowledge",
            lambda: self.daemon.store.set_device_knowledge(
                device_id, event.seq, status, int(event.reason), event.held_seq or 0
            ),
        )
        if event.held_seq is not None:  # newer than any STATUS answered before the push
            self.reported_knowledge = max(self.reported_knowledge or 0, event.held_seq)
        log.info(
            "knowledge answered",
            extra=self._ctx(seq=event.seq, status=status, reason=int(event.reason)),
        )

    # ---- housekeeping (on the daemon's thread) -----------------------------------------
    #
    # Requests are posted to the link and run on the link's own thread: housekeeping
    # never touches a line, so a line that stalls delays nobody else's STATUS, counter
    # save or knowledge push.

    def housekeeping(self, now: float) -> None:
        if not self._state_saved:
            self._state_saved = self._save_state()  # the store missed it: try again
        link = self.link
        if link is None or not self.session.is_open or self.device_id is None:
            return
        cfg = self.daemon.config
        if cfg.status_every and now - self.last_status_request >= cfg.status_every:
            self.last_status_request = now
            log.debug("status requested", extra=self._ctx())
            link.post(self._request_status)
        self._maybe_push(link)

    def traffic(self, now: float) -> None:
        """At debug level, once per TRAFFIC_LOG_EVERY_S: what the line carried since the
        last summary (frames and bytes each way, messages by type, counter saves)."""
        if not log.isEnabledFor(logging.DEBUG):
            return
        at = self._traffic_at
        if at is not None and now - at[1] < TRAFFIC_LOG_EVERY_S:
            return
        flat = flatten_counters(self.session.counters.snapshot())
        self._traffic_at = (flat, now)
        if at is None:
            return
        before = at[0]
        moved = {k: v - before.get(k, 0) for k, v in flat.items() if v != before.get(k, 0)}
        if not moved and not self._saves:
            return
        summary = {
            k.replace(".", "_"): v for k, v in moved.items() if k.split(".")[0] in TRAFFIC_FIELDS
        }
        log.debug(
            "line traffic",
            extra=self._ctx(seconds=round(now - at[1], 1), saves=self._saves, **summary),
        )
        self._saves = 0

    def noise(self) -> int:
        """Frames this line sent that were damaged or had to be refused, all sessions."""
        c = self.session.counters
        return c.frames_bad_total + sum(c.refused_in.values())

    def _quieten(self, now: float) -> None:
        """Pause reading a line that floods the host with frames it must refuse (on the
        link's thread, after every turn; see NOISE_LOOK_S)."""
        noise, at = self.noise(), self._noise_at
        if now < self._paused_until:
            # paused: the count stands still; the next window starts when reading does
            # (a window over the pause would find the line quiet and forget the flood)
            self._noise_at = (noise, now)
            return
        if at is not None and now - at[1] < NOISE_LOOK_S and noise - at[0] <= NOISE_PER_S:
            return  # too soon to judge, and not yet a flood's worth
        self._noise_at = (noise, now)
        link = self.link
        if at is None or link is None or now <= at[1]:
            return
        rate = (noise - at[0]) / (now - at[1])
        if rate <= NOISE_PER_S:
            if now - self._proof_refused_at > NOISE_PAUSE_MAX_S:  # quiet, and no impostor
                if self._pause_s != NOISE_PAUSE_S:
                    log.debug("line quiet again", extra=self._ctx(refused_per_s=round(rate)))
                self._pause_s = NOISE_PAUSE_S
            return
        self.line_pauses += 1
        link.pause_reading(self._pause_s)
        self._paused_until = now + self._pause_s
        log.warning(
            "line paused", extra=self._ctx(refused_per_s=round(rate), pause_s=self._pause_s)
        )
        self._pause_s = min(self._pause_s * 2, NOISE_PAUSE_MAX_S)

    def _request_status(self, session: Session) -> None:
        try:
            session.request_status()
        except SessionError as exc:
            log.warning("status request refused", extra=self._ctx(detail=str(exc)))

    def _maybe_push(self, link: Link) -> None:
        assert self.device_id is not None
        latest = self.daemon.latest_knowledge()
        if latest is None or self.knowledge_posted is not None:
            return
        seq, raw = latest
        if seq in self.knowledge_given_up or seq in self.knowledge_pending.values():
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
        log.debug("knowledge push posted", extra=self._ctx(seq=seq, held=self.reported_knowledge))
        self.knowledge_posted = seq
        link.post(lambda session: self._push(session, seq, raw))

    def _push(self, session: Session, seq: int, raw: bytes) -> None:
        """On the link's thread: offer knowledge version ``seq`` to the device."""
        self.knowledge_posted = None
        device_id = self.device_id
        assert device_id is not None
        store = self.daemon.store
        try:
            token = session.push_knowledge(raw)
        except SessionError as exc:
            self.knowledge_given_up.add(seq)
            self._store_write(
                "device knowledge",
                lambda: store.set_device_knowledge(device_id, seq, "not-sent", 0, 0),
            )
            log.warning("knowledge not pushed", extra=self._ctx(seq=seq, detail=str(exc)))
            return
        self.knowledge_pending[token] = seq
        self._store_write(
            "device knowledge", lambda: store.set_device_knowledge(device_id, seq, "pending")
        )
        log.info("knowledge pushed", extra=self._ctx(seq=seq))

    def counters(self) -> dict[str, int]:
        flat = flatten_counters(self.session.counters.snapshot())
        flat.update({f"device.{k}": v for k, v in self.device_status.items()})
        flat["reconnects"] = self.reconnects
        flat["store_errors"] = self.store_errors
        flat["worker_errors"] = self.worker_errors
        flat["device_logs_dropped"] = self.logs_dropped
        flat["line_pauses"] = self.line_pauses
        flat["record_conflicts"] = self.intake.record_conflicts
        return flat

    def save(self) -> bool:
        """Save the counters to the store; False (counted, logged) when it cannot write."""
        device_id = self.device_id
        if device_id is None:
            return True
        counters = self.counters()
        # a device is seen whenever a good frame came, not only at its HELLO
        frames = counters.get("frames_good", 0)
        seen_at = self._frame_seen_at if frames == self._frames_saved else now_ms()
        if frames != self._frames_heard:
            self._frames_heard, self.last_heard = frames, time.time()
        saved = self._store_write(
            "counters",
            lambda: self.daemon.store.save_counters(device_id, counters, seen_at=seen_at),
        )
        if saved:
            self._frames_saved, self._frame_seen_at = frames, seen_at
        return saved


class Background(Protocol):
    """A periodic job the daemon runs on a thread of its own."""

    name: str
    interval: float

    def tick(self) -> object: ...

    def close(self) -> None: ...


class Daemon:
    """The whole daemon: store, workers, housekeeping, metrics. :meth:`run` until signalled."""

    def __init__(
        self,
        config: DaemonConfig,
        *,
        store: Store | None = None,
        background: Sequence[Background] = (),
    ) -> None:
        self.config = config
        self.store = store if store is not None else Store(config.database)
        self.stopping = threading.Event()
        self.workers = [DeviceWorker(self, dev) for dev in config.devices]
        self._house = threading.Thread(target=self._housekeeping, name="housekeeping", daemon=True)
        self.background: list[Background] = []
        self.background_failures: dict[str, int] = {}
        self._jobs: list[threading.Thread] = []
        self.registry = daemon_registry(self)  # what /metrics serves
        self.endpoint: Endpoint | None = None
        self._knowledge_cache: tuple[int, bytes] | None = None
        self._started = False
        self.outbox: Outbox | None = None  # forwards accepted packs to the fleet
        if config.fleet is not None:  # imported here: a daemon without a fleet loads no HTTP
            from hirmem.daemon.outbox import Outbox

            self.outbox = Outbox(self.store, config.fleet)
            self.add_background(self.outbox)
        for job in background:
            self.add_background(job)

    def add_background(self, job: Background) -> None:
        """Run ``job`` from :meth:`start` on (the daemon closes it at stop)."""
        if self._started:
            raise RuntimeError("add background jobs before the daemon starts")
        self.background.append(job)
        self.background_failures[job.name] = 0
        self._jobs.append(
            threading.Thread(target=self._run_job, args=(job,), name=job.name, daemon=True)
        )

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
        if self.config.metrics is not None:  # first: a busy port starts nothing else
            endpoint = Endpoint(self, self.config.metrics, self.registry)
            endpoint.start()
            self.endpoint = endpoint
        for worker in self.workers:
            worker.start()
        self._house.start()
        for job in self._jobs:
            job.start()
        self._started = True
        log.info(
            "daemon started",
            extra={"ctx": {"devices": len(self.workers), "database": str(self.config.database)}},
        )

    def stop(self) -> None:
        if not self._started:
            self._close_background()
            self.store.close()
            return
        self.stopping.set()
        for worker in self.workers:
            worker.stop()
        for worker in self.workers:
            worker.join(5.0)
        self._house.join(5.0)
        for job in self._jobs:
            job.join(60.0)  # a sweep in progress finishes its transaction
        self._close_background()
        unsaved = [w.config.label for w in self.workers if not w.save()]
        if self.endpoint is not None:
            self.endpoint.stop()
        try:
            self.store.close()
        except Exception as exc:  # closing must not turn a clean stop into a traceback
            log.warning("store did not close cleanly", extra={"ctx": {"detail": str(exc)}})
        self._started = False
        if unsaved:
            log.warning("counters not saved at stop", extra={"ctx": {"devices": unsaved}})
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

    def _run_job(self, job: Background) -> None:
        while not self.stopping.wait(job.interval):
            try:
                job.tick()
            except Exception:
                self.background_failures[job.name] += 1
                log.exception("background job failed", extra={"ctx": {"job": job.name}})

    def _close_background(self) -> None:
        for job in self.background:
            try:
                job.close()
            except Exception:
                log.exception("background job failed to close", extra={"ctx": {"job": job.name}})

    def _housekeeping(self) -> None:
        while not self.stopping.wait(self.config.save_every):
            now = time.monotonic()
            for worker in self.workers:
                try:
                    worker.housekeeping(now)
                    worker.save()
                    worker.traffic(now)
                except Exception:
                    log.exception("housekeeping failed", extra=worker._ctx())


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

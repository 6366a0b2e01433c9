"""The host side of one device session (``protocol/SPEC.md`` §4 to §6, §8.5), sans-IO.

:class:`Session` is a state machine for ONE device on one line. It owns no thread,
socket or clock: the caller hands it the bytes read from the line with
:meth:`Session.feed`, runs its timers with :meth:`Session.poll`, and writes what
:meth:`Session.take_output` returns. Every call carries ``now_ms``, a monotonic
millisecond clock, so a test can drive it with a virtual clock and get the same
bytes every time. :mod:`hirmem.link.line` runs it over a :mod:`hirmem.link.transport`.

What it does, in the host's role:

- answers HELLO with HELLO_ACK (agreed max_frame and window, its max_message, the wall
  clock, the device's chain head from the :class:`PackIntake`, and a fresh random
  challenge); resends the stored HELLO_ACK byte-identical for a retransmitted HELLO;
  starts a new session for a new boot or a device that lost its session;
- opens the session only when the device's PROOF (its first sequenced message)
  verifies with the key the intake registered for its id (§6.5): until then nothing
  of the device is reported but a refusal (:class:`ProofRefused`, the intake's
  ``proof_refused``). A device the intake holds no key for gets a session whose
  :class:`SessionOpened` says ``proven=False`` (its packs are refused unknown-key);
  :class:`DeviceReset` when a proven device's boot changed;
- sequences, acknowledges (delayed ACK, ``ack_delay_ms`` ≤ 20 ms), retransmits
  go-back-N (RTO 250 ms doubling to 4 s, the session dies at the 8th timeout);
- joins bodies that arrive cut into frame pieces and cuts its own large messages
  (towards a device that announced FRAGMENTS, within the device's max_message; §6.8);
- sends CAPTURE, STATUS_REQUEST and KNOWLEDGE_PUSH requests and matches their results;
- hands every PACK_OFFER to the intake and sends its PACK_RESULT only once the intake
  has returned, in the order of the offers; a retransmitted offer is re-acknowledged,
  never handed over twice;
- answers bad messages with ERROR (§4.3, §6.7), sequenced messages without a session
  with ERROR no-session, and never answers frame damage or an ERROR;
- reports what happened as events (:meth:`Session.take_events`) and keeps
  :class:`Counters`.
"""

from __future__ import annotations

import copy
import os
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from hirmem.protocol import pieces
from hirmem.protocol.clock import now_ms
from hirmem.protocol.errors import FrameError, HirmemError, MessageError, PackError
from hirmem.protocol.frames import CRC_SIZE, MIN_MAX_FRAME, FrameDecoder, encode_frame
from hirmem.protocol.keys import ID_SIZE, PublicKey
from hirmem.protocol.messages import (
    U32,
    Ack,
    Capability,
    Capture,
    CaptureResult,
    ErrorCode,
    Hello,
    HelloAck,
    KnowledgePush,
    KnowledgeResult,
    Log,
    LogLevel,
    Message,
    MsgType,
    PackOffer,
    PackResult,
    PackStatus,
    Proof,
    Status,
    StatusRequest,
    decode_message,
    encode_message,
    peek_header,
)
from hirmem.protocol.messages import Error as ErrorMsg
from hirmem.protocol.packs import (
    ChainHead,
    KnowledgeItem,
    Pack,
    PackKind,
    Reason,
    TrustedKey,
    read_unverified,
    verify_pack,
)
from hirmem.protocol.proof import CHALLENGE_SIZE, hello_echo, verify_proof
from hirmem.protocol.records import GENESIS

RTO_MS = 250
RTO_MAX_MS = 4000
MAX_TIMEOUTS = 8
ACK_DELAY_MAX_MS = 20
DEFER_MS = 4000  # a deferred knowledge push is offered again no sooner than this
# A knowledge version the device deferred this many times in a row is one it cannot
# hold (a board answers *deferred* for more facts than it has room for): the push ends
# with that answer instead of blocking the versions after it.
KNOWLEDGE_DEFERRALS = 3
MAX_WINDOW = 8
MAX_CLAIMED_BOOTS = 16  # unproven boots remembered between sessions (DeviceReset events)
PRE_SESSION_TEXT = 100  # ERROR detail bytes before the handshake completes (§6.5)
MAX_TEXT = 240
ZERO_PACK_ID = bytes(16)

# Types a host accepts from a device (§5.1); anything else is unknown-type.
DEVICE_TYPES = frozenset(
    {
        MsgType.HELLO,
        MsgType.CAPTURE_RESULT,
        MsgType.PACK_OFFER,
        MsgType.KNOWLEDGE_RESULT,
        MsgType.STATUS,
        MsgType.LOG,
        MsgType.ERROR,
        MsgType.ACK,
        MsgType.PROOF,
    }
)


class SessionError(HirmemError):
    """A request the session cannot take (bad arguments, a pack it cannot push)."""


# ---- what the session knows about the device --------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """The device as its HELLO describes it."""

    device_id: bytes
    board: str
    firmware: str
    boot: int
    capabilities: int
    max_frame: int
    max_message: int
    window: int
    device_kid: bytes
    host_kid: bytes
    knowledge_facts: int = 0  # most facts it keeps from one pack (0: not stated)
    knowledge_text: int = 0  # longest text of a fact it keeps, in bytes

    @classmethod
    def from_hello(cls, hello: Hello) -> DeviceInfo:
        return cls(
            hello.device_id,
            hello.board,
            hello.firmware,
            hello.boot,
            hello.capabilities,
            hello.max_frame,
            hello.max_message,
            hello.window,
            hello.device_kid,
            hello.host_kid,
            hello.knowledge_facts,
            hello.knowledge_text,
        )

    def can(self, capability: Capability) -> bool:
        return bool(self.capabilities & int(capability))


# ---- the intake: where PACK_OFFERs go -----------------------------------------------


@dataclass(frozen=True, slots=True)
class PackDisposition:
    """What the intake decided about one offered pack; becomes the PACK_RESULT."""

    status: PackStatus
    reason: Reason = Reason.NONE
    pack_id: bytes = ZERO_PACK_ID  # zero unless verification got past §8.4 step 9
    seq: int = 0  # the pack's seq when known
    detail: str = ""

    def __post_init__(self) -> None:
        if len(self.pack_id) != 16:
            raise ValueError(f"pack_id must be 16 bytes, got {len(self.pack_id)}")
        want_ok = {
            PackStatus.ACCEPTED: self.reason == Reason.NONE,
            PackStatus.DUPLICATE: self.reason == Reason.NONE,
            PackStatus.REFUSED: Reason.MALFORMED <= self.reason <= Reason.BAD_RECORD,
            PackStatus.DEFERRED: self.reason == Reason.STORAGE,
        }[self.status]
        if not want_ok:
            raise ValueError(
                f"status {self.status.name} cannot carry reason {self.reason.name} (SPEC §5.7)"
            )

    @classmethod
    def accepted(cls, pack: Pack) -> PackDisposition:
        return cls(PackStatus.ACCEPTED, Reason.NONE, pack.pack_id, pack.seq)

    @classmethod
    def duplicate(cls, pack: Pack) -> PackDisposition:
        return cls(PackStatus.DUPLICATE, Reason.NONE, pack.pack_id, pack.seq)

    @classmethod
    def refused(
        cls, reason: Reason, detail: str, pack_id: bytes = ZERO_PACK_ID, seq: int = 0
    ) -> PackDisposition:
        return cls(PackStatus.REFUSED, reason, pack_id, seq, detail)

    @classmethod
    def deferred(cls, detail: str) -> PackDisposition:
        return cls(PackStatus.DEFERRED, Reason.STORAGE, ZERO_PACK_ID, 0, detail)


class PackIntake(Protocol):
    """Where a session's device packs go; the daemon implements it over its store.

    ``offer`` is called once per delivered PACK_OFFER, synchronously; the session
    sends the PACK_RESULT only after it returned, so an intake that commits before
    returning acknowledges only durable packs. It must give the same answer for the
    same bytes offered again (the verifier's *duplicate* does that for the chain
    head). An exception from ``offer`` is answered *deferred* (storage): the device
    offers the same bytes again later. ``chain_head`` feeds HELLO_ACK.

    ``device_key`` is the public key registered for the device's id (None: none is),
    which its PROOF must verify with; ``proof_refused`` records a PROOF that did not
    (the body as received, why), bounded as pack refusals are.
    """

    def chain_head(self, device: DeviceInfo) -> ChainHead | None: ...

    def offer(self, device: DeviceInfo, pack: bytes) -> PackDisposition: ...

    def device_key(self, device: DeviceInfo) -> PublicKey | None: ...

    def proof_refused(
        self, device: DeviceInfo, body: bytes, reason: Reason, detail: str
    ) -> None: ...


class MemoryIntake:
    """An intake that verifies with :func:`~hirmem.protocol.packs.verify_pack`, heads in memory.

    For tests and tools: ``accepted`` lists every pack taken, in order, ``answers``
    every disposition given. Chain heads are per device id (the device on the line).
    """

    def __init__(
        self, keys: Mapping[bytes, TrustedKey], heads: Mapping[bytes, ChainHead] | None = None
    ) -> None:
        self.keys = dict(keys)
        self.heads: dict[bytes, ChainHead] = dict(heads or {})
        self.accepted: list[Pack] = []
        self.answers: list[PackDisposition] = []
        self.proofs_refused: list[tuple[bytes, Reason, str]] = []  # (device id, reason, detail)

    def chain_head(self, device: DeviceInfo) -> ChainHead | None:
        return self.heads.get(device.device_id)

    def device_key(self, device: DeviceInfo) -> PublicKey | None:
        for trusted in self.keys.values():
            if trusted.kind == PackKind.MEMORY and trusted.signer == device.device_id:
                return trusted.public
        return None

    def proof_refused(self, device: DeviceInfo, body: bytes, reason: Reason, detail: str) -> None:
        self.proofs_refused.append((device.device_id, reason, detail))

    def offer(self, device: DeviceInfo, pack: bytes) -> PackDisposition:
        answer = self._verify(device, pack)
        self.answers.append(answer)
        return answer

    def _verify(self, device: DeviceInfo, pack: bytes) -> PackDisposition:
        head = self.heads.get(device.device_id)
        try:
            verified = verify_pack(pack, self.keys, head, PackKind.MEMORY, require_chain=True)
        except PackError as exc:
            return PackDisposition.refused(Reason(exc.reason), exc.detail, exc.pack_id, exc.seq)
        if verified.duplicate:
            return PackDisposition.duplicate(verified.pack)
        self.heads[device.device_id] = ChainHead(verified.pack.seq, verified.pack.hash)
        self.accepted.append(verified.pack)
        return PackDisposition.accepted(verified.pack)


# ---- events ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionOpened:
    """The handshake completed: the device's PROOF arrived after our HELLO_ACK.

    ``proven``: it verified with the key registered for the device's id. False only
    when no key is registered for that id (nothing to impersonate; the session serves
    to refuse the device's packs as unknown-key, and nothing else of it is recorded).
    """

    device: DeviceInfo
    max_frame: int  # agreed
    window: int  # agreed
    pack_seq: int  # the chain head the HELLO_ACK carried
    at_ms: int
    proven: bool = True


@dataclass(frozen=True, slots=True)
class ProofRefused:
    """A PROOF that did not verify (or a first message that was no PROOF): no session."""

    device_id: bytes  # as the HELLO claimed it
    reason: str  # "bad-signature" or "not-proof"
    detail: str


@dataclass(frozen=True, slots=True)
class SessionLost:
    reason: str
    device_id: bytes


@dataclass(frozen=True, slots=True)
class DeviceReset:
    """The device sent HELLO with another boot counter: it rebooted."""

    device_id: bytes
    old_boot: int
    new_boot: int


@dataclass(frozen=True, slots=True)
class CaptureDone:
    """A CAPTURE_RESULT: for our CAPTURE ``token``, or the device's own (token None)."""

    token: int | None
    result: CaptureResult


@dataclass(frozen=True, slots=True)
class StatusReport:
    """A STATUS; ``token`` is the oldest STATUS_REQUEST outstanding, None if none was.

    STATUS carries no reference, so a periodic STATUS the device sends of its own
    accord while a request is outstanding is taken as that request's answer.
    """

    token: int | None
    status: Status


@dataclass(frozen=True, slots=True)
class KnowledgeDone:
    """The end of a knowledge push: the device's KNOWLEDGE_RESULT, or why there is none."""

    token: int
    pack_id: bytes
    seq: int
    status: PackStatus | None  # None: not delivered (see detail)
    reason: Reason  # with status None: STORAGE when the device's stated limits rule it out
    held_seq: int | None  # what the device holds now, when it answered
    detail: str = ""


@dataclass(frozen=True, slots=True)
class PackReceived:
    """A PACK_OFFER the intake accepted (or recognised as its chain head again)."""

    device_id: bytes
    pack_id: bytes
    seq: int
    duplicate: bool


@dataclass(frozen=True, slots=True)
class PackRefused:
    """A PACK_OFFER the intake refused (status refused) or could not store (deferred)."""

    device_id: bytes
    disposition: PackDisposition


@dataclass(frozen=True, slots=True)
class LogLine:
    level: LogLevel
    text: str


@dataclass(frozen=True, slots=True)
class ErrorReceived:
    code: int
    ref: int
    detail: str


@dataclass(frozen=True, slots=True)
class RequestFailed:
    """A CAPTURE or STATUS_REQUEST that will get no answer; ``reason`` says why."""

    token: int
    kind: str  # "capture" or "status"
    reason: str


@dataclass(frozen=True, slots=True)
class IntakeFailed:
    """The intake raised; the session answered what it safely could (see detail)."""

    operation: str
    detail: str


Event = (
    SessionOpened
    | ProofRefused
    | SessionLost
    | DeviceReset
    | CaptureDone
    | StatusReport
    | KnowledgeDone
    | PackReceived
    | PackRefused
    | LogLine
    | ErrorReceived
    | RequestFailed
    | IntakeFailed
)


# ---- counters --------------------------------------------------------------------------


def _bump(table: dict[str, int], key: str, n: int = 1) -> None:
    table[key] = table.get(key, 0) + n


@dataclass
class Counters:
    """Everything the session counted since it was created (all sessions together)."""

    bytes_in: int = 0
    bytes_out: int = 0
    frames_good: int = 0
    frames_empty: int = 0
    frames_bad: dict[str, int] = field(default_factory=dict)  # by FrameError kind
    frames_out: int = 0
    messages_in: dict[str, int] = field(default_factory=dict)  # well-formed, by type
    messages_out: dict[str, int] = field(default_factory=dict)  # first transmissions
    refused_in: dict[str, int] = field(default_factory=dict)  # answered ERROR, by code
    errors_in: dict[str, int] = field(default_factory=dict)  # ERRORs received, by code
    delivered: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    retransmissions: int = 0
    timeouts: int = 0
    acks_out: int = 0
    hellos: int = 0
    hello_retransmits: int = 0  # HELLO repeats answered with the stored HELLO_ACK
    sessions_opened: int = 0
    proofs_verified: int = 0
    proofs_unchecked: int = 0  # PROOFs of an id with no registered key (not verifiable)
    proofs_refused: dict[str, int] = field(default_factory=dict)  # by reason
    sessions_lost: int = 0
    device_resets: int = 0
    no_session: int = 0  # sequenced messages answered ERROR no-session
    fragments_in: int = 0  # frames that were pieces of a body (§6.8)
    fragments_out: int = 0
    reassembled: int = 0  # bodies joined from pieces
    pieces_refused: dict[str, int] = field(default_factory=dict)  # by refusal kind
    captures_sent: int = 0
    capture_results: int = 0
    own_captures: int = 0
    status_reports: int = 0
    packs_offered: int = 0
    packs_accepted: int = 0
    packs_duplicate: int = 0
    packs_deferred: int = 0
    packs_refused: dict[str, int] = field(default_factory=dict)  # by reason name
    knowledge_pushed: int = 0  # KNOWLEDGE_PUSH transmissions (first per session)
    knowledge_accepted: int = 0
    knowledge_refused: dict[str, int] = field(default_factory=dict)
    requests_failed: int = 0
    intake_failures: int = 0

    @property
    def frames_bad_total(self) -> int:
        return sum(self.frames_bad.values())

    def snapshot(self) -> Counters:
        """A deep copy, safe from a thread other than the counting one (housekeeping,
        /metrics): a copy that met a dict growing a key under it is taken again."""
        for _ in range(64):
            try:
                return copy.deepcopy(self)
            except RuntimeError:  # "dictionary changed size during iteration"
                continue
        return copy.deepcopy(self)


# ---- configuration ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """The host's side of the negotiation and its timers."""

    host_id: bytes
    max_frame: int = 512  # largest decoded frame the host accepts
    max_message: int = 65536 + 16  # largest body the host reassembles: a full pack offer
    window: int = 4
    ack_delay_ms: int = 10  # delayed ACK; SPEC allows up to 20 ms
    keepalive_ms: int = 0  # >0: STATUS_REQUEST after this much silence (detects loss)

    def __post_init__(self) -> None:
        problems = []
        if len(self.host_id) != ID_SIZE:
            problems.append(f"host_id must be {ID_SIZE} bytes, got {len(self.host_id)}")
        if not MIN_MAX_FRAME <= self.max_frame <= 0xFFFF:
            problems.append(f"max_frame must be in {MIN_MAX_FRAME}..65535, got {self.max_frame}")
        if not 0 < self.max_message <= U32:
            problems.append(f"max_message must be in 1..{U32}, got {self.max_message}")
        if not 1 <= self.window <= MAX_WINDOW:
            problems.append(f"window must be in 1..{MAX_WINDOW}, got {self.window}")
        if not 0 <= self.ack_delay_ms <= ACK_DELAY_MAX_MS:
            problems.append(f"ack_delay_ms must be in 0..{ACK_DELAY_MAX_MS} (SPEC §6.2)")
        if self.keepalive_ms < 0:
            problems.append("keepalive_ms must be 0 (off) or positive")
        if problems:
            raise ValueError("bad session configuration: " + "; ".join(problems))


# ---- internals -------------------------------------------------------------------------


class _Phase(Enum):
    IDLE = "idle"  # no session: waiting for HELLO
    HANDSHAKE = "handshake"  # HELLO_ACK sent, not acknowledged yet
    OPEN = "open"


@dataclass(eq=False)
class _Request:
    token: int | None  # None for keepalive probes
    kind: str  # "capture", "status", "knowledge"
    message: Message
    ref: int = 0  # seq (or msg_id) it was sent with in the current session; 0: unsent
    done: bool = False
    # knowledge pushes
    pack_id: bytes = ZERO_PACK_ID
    seq: int = 0
    kid: bytes = b""
    size: tuple[int, int] = (0, 0)  # facts, longest text
    retry_at: int | None = None
    deferrals: int = 0


@dataclass(eq=False)
class _Out:
    """A sequenced message waiting for the window (one seq, however many frames)."""

    message: Message
    request: _Request | None = None
    offer: int = 0  # a PACK_RESULT: the seq of the offer it answers (names it at send time)


def request_problem(
    device: DeviceInfo, kind: str, kid: bytes | None, inner_size: int, max_frame: int
) -> str:
    """Why ``device`` (as its HELLO describes it) cannot take a request of ``kind`` whose
    message is ``inner_size`` bytes, over frames of ``max_frame``; "" when it can.

    ``kid``: the key a knowledge pack is signed with (the device takes only its host's).
    The session fails such a request at once; ``hirmem push`` asks the same question of
    every device whose HELLO the store remembers.
    """
    need = {
        "capture": Capability.CAPTURE,
        "status": Capability.STATUS,
        "knowledge": Capability.KNOWLEDGE,
    }[kind]
    if not device.can(need):
        return f"the device did not announce {need.name} (capabilities 0x{device.capabilities:x})"
    if kid is not None and device.host_kid != kid:
        trusted = device.host_kid.hex() or "none"
        return (
            f"the device trusts host key {trusted}, the pack is signed by "
            f"{kid.hex()}: it would refuse it (unknown-key)"
        )
    too_big = inner_size + CRC_SIZE > max_frame
    if too_big and inner_size > device.max_message:
        return (
            f"the message is {inner_size} bytes, the device reassembles at most "
            f"{device.max_message}"
        )
    if too_big and not device.can(Capability.FRAGMENTS):
        return "the message needs fragments and the device did not announce FRAGMENTS"
    return ""


def knowledge_size(pack: Pack) -> tuple[int, int]:
    """(facts, longest subject/predicate/object in bytes) of a knowledge pack."""
    longest = 0
    for item in pack.items:
        if isinstance(item, KnowledgeItem):
            for text in (item.subject, item.predicate, item.obj):
                longest = max(longest, len(text.encode("utf-8")))
    return len(pack.items), longest


def capacity_problem(device: DeviceInfo, size: tuple[int, int]) -> str:
    """Why ``device`` could not keep a knowledge pack of ``size`` (facts, longest text)
    by the limits its HELLO states (SPEC §5.2); "" when it can or did not state them."""
    facts, longest = size
    if device.knowledge_facts and facts > device.knowledge_facts:
        return f"the device keeps at most {device.knowledge_facts} facts, the pack has {facts}"
    if device.knowledge_text and longest > device.knowledge_text:
        return (
            f"the device keeps texts of at most {device.knowledge_text} bytes, the pack has "
            f"one of {longest}"
        )
    return ""


def _cut(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore")


_wall_ms = now_ms


class Session:
    """Host session state machine for one device (see the module docstring)."""

    def __init__(
        self,
        config: SessionConfig,
        intake: PackIntake,
        *,
        wall_ms: Callable[[], int] = _wall_ms,
        challenge: Callable[[], bytes] = lambda: os.urandom(CHALLENGE_SIZE),
    ) -> None:
        self.config = config
        self.intake = intake
        self._wall_ms = wall_ms
        self._new_challenge = challenge
        self.counters = Counters()
        self._rx = FrameDecoder(config.max_frame)
        self._joiner = pieces.Joiner(config.max_message)
        self._out = bytearray()
        self._flush_line = True  # one 00 before the first frame (§2.6)
        self._events: list[Event] = []
        self._now = 0
        self._next_token = 1
        self.device: DeviceInfo | None = None  # of the current or the last session
        self._proven: DeviceInfo | None = None  # of the last session opened
        self._phase = _Phase.IDLE
        self._hello_ack = b""
        self._hello_body = b""  # the HELLO the PROOF must cover, as received
        self._claimed_boots: list[int] = []  # boots of unproven HELLOs since the last session
        self._challenge = bytes(CHALLENGE_SIZE)
        self._head_seq = 0
        self._agreed = (MIN_MAX_FRAME, 1)
        self._max_frame = MIN_MAX_FRAME  # what we send: 128 until the handshake completes
        self._window = 1
        self._next_seq = 1
        self._expected = 1
        self._unacked: deque[tuple[int, bytes]] = deque()
        self._rto = RTO_MS
        self._timeouts = 0
        self._timer_at: int | None = None
        self._ack_at: int | None = None
        self._last_rx = 0
        self._queue: deque[_Out] = deque()
        self._sent: dict[int, _Request] = {}  # ref -> capture / status / knowledge request
        self._status_waiting: deque[_Request] = deque()  # sent STATUS_REQUESTs, oldest first
        self._knowledge: list[_Request] = []  # pushes not finished, in push order

    # ---- public state ------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._phase is _Phase.OPEN

    @property
    def phase(self) -> str:
        return self._phase.value

    @property
    def max_frame(self) -> int:
        """The max_frame the host currently sends with (128 until the handshake completes)."""
        return self._max_frame

    @property
    def window(self) -> int:
        return self._window

    @property
    def in_flight(self) -> int:
        return len(self._unacked)

    # ---- the sans-IO surface -----------------------------------------------------------

    def feed(self, data: bytes, now_ms: int) -> None:
        """Bytes read from the line, in any chunking."""
        self._now = now_ms
        self.counters.bytes_in += len(data)
        for item in self._rx.feed(data):
            if isinstance(item, FrameError):
                _bump(self.counters.frames_bad, item.kind)
                continue
            self.counters.frames_good += 1
            self._last_rx = now_ms
            if pieces.is_piece(item):
                self._on_piece(item)
            else:
                self._on_body(item)
        self.counters.frames_empty = self._rx.stats.empty
        self._service(now_ms)

    def poll(self, now_ms: int) -> None:
        """Run the timers: retransmission, delayed ACK, deferred pushes, keepalive."""
        self._now = now_ms
        if self._timer_at is not None and now_ms >= self._timer_at:
            self._on_timeout(now_ms)
        for job in list(self._knowledge):
            if job.retry_at is not None and now_ms >= job.retry_at and self.is_open:
                job.retry_at = None  # deferred by the device: offer it again
                self._admit(_Out(job.message, job))
        if (
            self.config.keepalive_ms
            and self.is_open
            and self.device is not None
            and self.device.can(Capability.STATUS)
            and not self._queue
            and not self._unacked
            and now_ms - self._last_rx >= self.config.keepalive_ms
        ):
            probe = _Request(None, "status", StatusRequest())
            self._queue.append(_Out(probe.message, probe))
            self._last_rx = now_ms  # one probe per silence period
        self._service(now_ms)

    def take_output(self) -> bytes:
        """The bytes to write to the line since the last call."""
        out = bytes(self._out)
        self._out.clear()
        return out

    def take_events(self) -> list[Event]:
        events, self._events = self._events, []
        return events

    def next_deadline(self) -> int | None:
        """The earliest ``now_ms`` at which :meth:`poll` has work, None if no timer runs."""
        times = [t for t in (self._timer_at, self._ack_at) if t is not None]
        times += [j.retry_at for j in self._knowledge if j.retry_at is not None]
        if self.config.keepalive_ms and self.is_open:
            times.append(self._last_rx + self.config.keepalive_ms)
        return min(times) if times else None

    def line_reconnected(self) -> None:
        """The transport was reopened: flush the peer's receiver with a 00 before the next frame."""
        self._flush_line = True
        self._rx = FrameDecoder(self.config.max_frame)

    def drop(self, reason: str) -> None:
        """End the session from the host side (§6.6); the device's next message gets no-session."""
        if self._phase is not _Phase.IDLE:
            self._lose(reason)

    # ---- requests ----------------------------------------------------------------------

    def capture(
        self,
        source: str,
        payload: bytes,
        context: bytes,
        flags: int,
        confidence: int,
        provenance: int,
        priority: int = 0,
    ) -> int:
        """Queue a CAPTURE; its CaptureDone (or RequestFailed) carries the returned token."""
        message = Capture(source, payload, context, flags, confidence, provenance, priority)
        return self._request("capture", message)

    def request_status(self) -> int:
        """Queue a STATUS_REQUEST; its StatusReport (or RequestFailed) carries the token."""
        return self._request("status", StatusRequest())

    def push_knowledge(self, pack: bytes) -> int:
        """Queue a signed knowledge pack for this device; retried until it is answered.

        It is re-queued into the next session when a session ends before the answer,
        offered again after a *deferred* answer, and ends in one :class:`KnowledgeDone`:
        the device's result, or why it could not be delivered (the device does not
        take knowledge, trusts another host key, cannot reassemble it, refused the
        message, or a newer push superseded it).
        """
        try:
            known = read_unverified(pack, PackKind.KNOWLEDGE)
        except PackError as exc:
            raise SessionError(f"not a knowledge pack: {exc}") from None
        pack_id, seq, kid = known.pack_id, known.seq, known.kid
        size = knowledge_size(known)
        message = KnowledgePush(pack)
        self._check_encodable(message)
        for older in [j for j in self._knowledge if j.seq < seq and j.retry_at is not None]:
            # waiting to be offered again after a deferral: the newer version replaces it
            self._queue = deque(item for item in self._queue if item.request is not older)
            self._finish_knowledge(
                older, None, Reason.NONE, None, f"superseded by knowledge pack seq {seq}"
            )
        job = _Request(
            self._token(), "knowledge", message, pack_id=pack_id, seq=seq, kid=kid, size=size
        )
        self._knowledge.append(job)
        if self.is_open:
            self._admit(_Out(message, job))
            self._service(self._now)
        else:
            self._queue.append(_Out(message, job))
        assert job.token is not None
        return job.token

    # ---- receiving ---------------------------------------------------------------------

    def _on_piece(self, piece: bytes) -> None:
        """One frame of a body cut into pieces (SPEC §6.8): joined below the session."""
        self.counters.fragments_in += 1
        try:
            body = self._joiner.take(piece)
        except MessageError as exc:
            kind = exc.detail.split(":", 1)[0]
            _bump(self.counters.pieces_refused, kind)
            if exc.code == ErrorCode.TOO_LARGE and self._phase is _Phase.OPEN:
                # the one refusal a retransmission cannot cure (the others are counted
                # and left to go-back-N): answered, and delivered as refused so that
                # the session moves on
                seq = self._joiner.seq
                self._refuse(exc.code, seq, exc.detail)
                if seq == self._expected:
                    self._expected += 1
                if 0 < seq < self._expected:
                    self._owe_ack()
            return
        if body is not None:
            self.counters.reassembled += 1
            self._on_body(body)

    def _on_body(self, body: bytes) -> None:
        try:
            env = decode_message(body)
        except MessageError as exc:
            header = peek_header(body)
            if header is not None and header[1] == MsgType.ERROR:
                _bump(self.counters.refused_in, "unanswered-error")
                return  # never answer an ERROR with an ERROR
            ref = header[2] if header is not None and 0 <= header[2] <= U32 else 0
            self._refuse(exc.code, ref, exc.detail)
            return
        message = env.message
        if message.TYPE not in DEVICE_TYPES:
            self._refuse(
                ErrorCode.UNKNOWN_TYPE,
                env.seq,
                f"message type {int(message.TYPE)} ({message.TYPE.name}) is not sent by a device",
            )
            return
        _bump(self.counters.messages_in, message.TYPE.name)
        if isinstance(message, Hello):
            self._on_hello(message, body)
            return
        if self._phase is _Phase.IDLE:
            if message.TYPE in (MsgType.ACK, MsgType.LOG, MsgType.ERROR):
                self._on_unsequenced(message)
            else:
                self.counters.no_session += 1
                self._send_error(ErrorCode.NO_SESSION, env.seq, "no session: send HELLO")
            return
        self._on_ack(env.ack)
        if message.TYPE in (MsgType.ACK, MsgType.LOG, MsgType.ERROR):
            self._on_unsequenced(message)
            return
        if env.seq == self._expected and self._phase is _Phase.HANDSHAKE:
            self._on_proof(message, body)  # the first message of a session (§6.5)
        elif env.seq == self._expected:
            self._expected += 1
            self.counters.delivered += 1
            self._owe_ack()
            self._deliver(message, env.seq)
        elif env.seq < self._expected:
            self.counters.duplicates += 1
            self._owe_ack()
        else:
            self.counters.out_of_order += 1
            self._owe_ack()

    def _on_unsequenced(self, message: Message) -> None:
        if isinstance(message, Log):
            self._events.append(LogLine(LogLevel(message.level), message.text))
        elif isinstance(message, ErrorMsg):
            self._on_error(message)

    def _refuse(self, code: int, ref: int, detail: str) -> None:
        _bump(self.counters.refused_in, ErrorCode(code).name.lower().replace("_", "-"))
        self._send_error(code, ref, detail)

    def _on_ack(self, ack: int) -> None:
        if not self._unacked or not self._unacked[0][0] <= ack <= self._next_seq - 1:
            return  # stale, repeated or beyond anything sent: ignored (§6.2)
        while self._unacked and self._unacked[0][0] <= ack:
            self._unacked.popleft()
        self._rto = RTO_MS
        self._timeouts = 0
        self._timer_at = self._now + self._rto if self._unacked else None

    def _deliver(self, message: Message, seq: int) -> None:
        if isinstance(message, CaptureResult):
            self._on_capture_result(message)
        elif isinstance(message, PackOffer):
            self._on_offer(message, seq)
        elif isinstance(message, KnowledgeResult):
            self._on_knowledge_result(message)
        elif isinstance(message, Proof):  # a PROOF is the first message, never a later one
            self._refuse(ErrorCode.MALFORMED, self._expected - 1, "PROOF after the handshake")
        elif isinstance(message, Status):
            self.counters.status_reports += 1
            request = self._status_waiting.popleft() if self._status_waiting else None
            if request is not None:
                request.done = True
                self._sent.pop(request.ref, None)
            self._events.append(StatusReport(request.token if request else None, message))

    def _on_capture_result(self, result: CaptureResult) -> None:
        self.counters.capture_results += 1
        if result.ref == 0:
            self.counters.own_captures += 1
            self._events.append(CaptureDone(None, result))
            return
        request = self._sent.get(result.ref)
        if request is None or request.kind != "capture":
            self._events.append(CaptureDone(None, result))  # unmatched: still reported
            return
        del self._sent[result.ref]
        request.done = True
        self._events.append(CaptureDone(request.token, result))

    def _on_offer(self, offer: PackOffer, seq: int) -> None:
        assert self.device is not None
        self.counters.packs_offered += 1
        try:
            answer = self.intake.offer(self.device, offer.pack)
        except Exception as exc:  # the device must get exactly one answer per offer
            self.counters.intake_failures += 1
            answer = PackDisposition.deferred(f"intake failed: {exc}")
            self._events.append(IntakeFailed("offer", f"{type(exc).__name__}: {exc}"))
        result = PackResult(0, int(answer.status), int(answer.reason))
        self._queue.append(_Out(result, offer=seq))
        device_id = self.device.device_id
        if answer.status in (PackStatus.ACCEPTED, PackStatus.DUPLICATE):
            duplicate = answer.status == PackStatus.DUPLICATE
            if duplicate:
                self.counters.packs_duplicate += 1
            else:
                self.counters.packs_accepted += 1
            self._events.append(PackReceived(device_id, answer.pack_id, answer.seq, duplicate))
        else:
            if answer.status == PackStatus.DEFERRED:
                self.counters.packs_deferred += 1
            else:
                _bump(self.counters.packs_refused, answer.reason.name.lower().replace("_", "-"))
            self._events.append(PackRefused(device_id, answer))

    def _on_knowledge_result(self, result: KnowledgeResult) -> None:
        sent = [j for j in self._knowledge if j.ref and j.retry_at is None]
        job = next((j for j in sent if j.pack_id == result.pack_id), None)
        if job is None and result.pack_id == ZERO_PACK_ID and sent:
            job = sent[0]  # refused before the device read its id: answers come in order
        if job is None:
            return
        self._sent.pop(job.ref, None)
        status = PackStatus(result.status)
        if status == PackStatus.DEFERRED:
            job.deferrals += 1
            if job.deferrals < KNOWLEDGE_DEFERRALS:
                job.ref = 0
                job.retry_at = self._now + DEFER_MS
                return
            _bump(self.counters.knowledge_refused, Reason(result.reason).name.lower())
            self._finish_knowledge(
                job, status, Reason(result.reason), result.held_seq,
                f"deferred {job.deferrals} times: the device cannot hold it",
            )  # fmt: skip
            return
        if status == PackStatus.REFUSED:
            _bump(self.counters.knowledge_refused, Reason(result.reason).name.lower())
        else:
            self.counters.knowledge_accepted += 1
        self._finish_knowledge(job, status, Reason(result.reason), result.held_seq, "")

    def _on_error(self, error: ErrorMsg) -> None:
        name = ErrorCode(error.code).name.lower().replace("_", "-")
        _bump(self.counters.errors_in, name)
        self._events.append(ErrorReceived(error.code, error.ref, error.detail))
        if error.code in (
            ErrorCode.TOO_LARGE,
            ErrorCode.REASSEMBLY,
            ErrorCode.MALFORMED,
            ErrorCode.UNKNOWN_TYPE,
            ErrorCode.INTERNAL,
        ):
            request = self._sent.pop(error.ref, None)
            if request is not None:
                self._fail(request, f"device answered ERROR {name}: {error.detail}")

    # ---- handshake and session lifetime ------------------------------------------------

    def _on_hello(self, hello: Hello, body: bytes) -> None:
        # Note on "fresh" (§6.5 host step 2): besides expected == 2, we also require that
        # the host sent nothing after HELLO_ACK. Otherwise a device that lost its session
        # would take the old HELLO_ACK, open with expected 2, and deliver our
        # retransmitted old-session messages (seq 2, 3, ...) a second time.
        self.counters.hellos += 1
        if hello.max_frame < MIN_MAX_FRAME:
            self.drop(f"device sent HELLO with max_frame {hello.max_frame}")
            self._refuse(
                ErrorCode.TOO_LARGE, 1, f"max_frame {hello.max_frame} is below {MIN_MAX_FRAME}"
            )
            return
        if hello.window == 0:
            self.drop("device sent HELLO with window 0")
            self._refuse(ErrorCode.MALFORMED, 1, "window 0: a window is 1..8")
            return
        old = self.device
        if (
            self._phase is not _Phase.IDLE
            and old is not None
            and (old.device_id, old.boot) == (hello.device_id, hello.boot)
            # byte for byte the HELLO we answered: the stored HELLO_ACK echoes its hash,
            # and a device that sends another HELLO ignores that echo (§5.3, §6.5)
            and body == self._hello_body
            and self._expected == 2
            and self._next_seq == 2  # we sent nothing after HELLO_ACK either (see note)
        ):
            self.counters.hello_retransmits += 1
            self._write(self._hello_ack)  # a fresh session: the HELLO was resent
            return
        device = DeviceInfo.from_hello(hello)
        try:
            head = self.intake.chain_head(device)
        except Exception as exc:  # no safe answer: the device resends HELLO
            self.counters.intake_failures += 1
            self._events.append(IntakeFailed("chain_head", f"{type(exc).__name__}: {exc}"))
            return
        if self._phase is not _Phase.IDLE:
            self._lose(f"device sent a new HELLO (boot {hello.boot}): starting a new session")
        if old is not None and old is not self._proven and old.device_id == hello.device_id:
            # a HELLO that was never proven: its boot counts if this device proves itself
            self._claimed_boots = [*self._claimed_boots, old.boot][-MAX_CLAIMED_BOOTS:]
        self.device = device
        self._reset_sequence()
        self._expected = 2  # HELLO (seq 1) delivered
        # a new challenge for every new session: a PROOF recorded in an earlier one
        # signs another challenge and opens nothing (a retransmitted HELLO above gets
        # the same HELLO_ACK, so the device's PROOF for it stays good)
        self._challenge = self._new_challenge()
        if len(self._challenge) != CHALLENGE_SIZE:
            raise SessionError(f"a challenge is {CHALLENGE_SIZE} bytes")
        self._hello_body = body
        agreed_frame = min(hello.max_frame, self.config.max_frame)
        agreed_window = min(hello.window, self.config.window)
        self._agreed = (agreed_frame, agreed_window)
        self._head_seq = head.seq if head is not None else 0
        answer = HelloAck(
            self.config.host_id,
            agreed_frame,
            self.config.max_message,
            agreed_window,
            self._wall_ms(),
            self._head_seq,
            head.hash if head is not None else GENESIS,
            self._challenge,
            hello_echo(body),  # names the HELLO it answers (§5.3)
        )
        self._phase = _Phase.HANDSHAKE
        self._hello_ack = encode_message(answer, 1, 1)
        self._send_sequenced(self._hello_ack, 1)

    def _on_proof(self, message: Message, body: bytes) -> None:
        """The message at seq 2 of a session in handshake: it must be a PROOF that
        verifies with the device's registered key; only then is the session open."""
        device = self.device
        assert device is not None
        if not isinstance(message, Proof):
            self._refuse_proof(
                body, "not-proof", f"the first message of a session must be PROOF, not "
                f"{message.TYPE.name}",
            )  # fmt: skip
            return
        try:
            key = self.intake.device_key(device)
        except Exception as exc:  # no answer: the device starts over and proves again
            self.counters.intake_failures += 1
            self._events.append(IntakeFailed("device_key", f"{type(exc).__name__}: {exc}"))
            self._phase = _Phase.IDLE
            self._reset_sequence()
            self._send_error(ErrorCode.NO_SESSION, 2, "cannot check the proof now: retry")
            return
        if key is not None and not verify_proof(
            key, message.signature, self.config.host_id, self._challenge, device.device_id,
            device.boot, self._hello_body,
        ):  # fmt: skip
            self._refuse_proof(
                body, "bad-signature", f"PROOF does not verify with the key registered for "
                f"device {device.device_id.hex()}",
            )  # fmt: skip
            return
        if key is None:
            self.counters.proofs_unchecked += 1
        else:
            self.counters.proofs_verified += 1
        self._expected += 1
        self.counters.delivered += 1
        self._owe_ack()
        self._open(proven=key is not None)

    def _refuse_proof(self, body: bytes, reason: str, detail: str) -> None:
        device = self.device
        assert device is not None
        _bump(self.counters.proofs_refused, reason)
        self._events.append(ProofRefused(device.device_id, reason, detail))
        try:
            self.intake.proof_refused(device, body, Reason.BAD_SIGNATURE, detail)
        except Exception as exc:  # still refused; only the record is missing
            self.counters.intake_failures += 1
            self._events.append(IntakeFailed("proof_refused", f"{type(exc).__name__}: {exc}"))
        self._phase = _Phase.IDLE
        self._reset_sequence()
        self.device = self._proven  # the claim was not proven: forget it
        self._claimed_boots = []
        self._send_error(ErrorCode.NO_SESSION, 2, "proof refused: no session")

    def _open(self, proven: bool) -> None:
        assert self.device is not None
        self._phase = _Phase.OPEN
        self._max_frame, self._window = self._agreed
        self.counters.sessions_opened += 1
        old, device = self._proven, self.device
        if proven and old is not None and old.device_id == device.device_id:
            # every boot change the HELLOs since the last session showed, now that the
            # device proved it is the one that sent them (a board reset twice in a row)
            boot = old.boot
            for claimed in [*self._claimed_boots, device.boot]:
                if claimed != boot:
                    self.counters.device_resets += 1
                    self._events.append(DeviceReset(device.device_id, boot, claimed))
                    boot = claimed
        self._claimed_boots = []
        if proven:
            self._proven = device
        self._events.append(
            SessionOpened(device, self._max_frame, self._window, self._head_seq, self._now, proven)
        )
        waiting, self._queue = self._queue, deque()
        for item in waiting:
            self._admit(item)

    def _reset_sequence(self) -> None:
        self._next_seq = 1
        self._expected = 1
        self._unacked.clear()
        self._rto = RTO_MS
        self._timeouts = 0
        self._timer_at = None
        self._ack_at = None
        self._joiner.reset()
        self._max_frame, self._window = MIN_MAX_FRAME, 1

    def _lose(self, reason: str) -> None:
        device_id = self.device.device_id if self.device is not None else b""
        self._phase = _Phase.IDLE
        self._reset_sequence()
        self.counters.sessions_lost += 1
        self._events.append(SessionLost(reason, device_id))
        # §6.6: answers to the old session are dropped; knowledge pushes are re-queued
        # (unless superseded); captures and status requests already sent may have taken
        # effect, so they fail; unsent ones wait for the next session.
        sent = list(self._sent.values())
        self._sent.clear()
        self._status_waiting.clear()
        for request in sent:
            if request.kind != "knowledge":
                self._fail(request, f"session lost before the answer ({reason})")
        keep = [
            _Out(item.message, item.request)
            for item in self._queue
            if item.request is not None and not item.request.done
        ]
        queued = {id(item.request) for item in keep}
        requeue: list[_Out] = []
        for job in list(self._knowledge):
            if job.done or id(job) in queued or job.retry_at is not None:
                continue
            newer = [j.seq for j in self._knowledge if not j.done and j.seq > job.seq]
            if newer:
                detail = f"superseded by knowledge pack seq {max(newer)}"
                self._finish_knowledge(job, None, Reason.NONE, None, detail)
                continue
            requeue.append(_Out(job.message, job))
        for out in requeue + keep:
            assert out.request is not None
            out.request.ref = 0
        self._queue = deque(requeue + keep)

    # ---- sending -----------------------------------------------------------------------

    def _token(self) -> int:
        token = self._next_token
        self._next_token += 1
        return token

    def _check_encodable(self, message: Message) -> None:
        try:
            encode_message(message, 1, 0)
        except MessageError as exc:
            raise SessionError(f"cannot send {type(message).__name__}: {exc.detail}") from None

    def _request(self, kind: str, message: Message) -> int:
        self._check_encodable(message)
        request = _Request(self._token(), kind, message)
        if self.is_open:
            self._admit(_Out(message, request))
            self._service(self._now)
        else:
            self._queue.append(_Out(message, request))
        assert request.token is not None
        return request.token

    def _admit(self, item: _Out) -> None:
        """Queue a request in an open session, failing it now if the device cannot take it."""
        assert self.device is not None
        request = item.request
        if request is None:
            self._queue.append(item)
            return
        kid = request.kid if request.kind == "knowledge" else None
        problem = request_problem(
            self.device, request.kind, kid, len(encode_message(item.message, U32, U32)),
            self._max_frame,
        )  # fmt: skip
        if problem:
            self._fail(request, problem)
            return
        if request.kind == "knowledge":
            cannot_keep = capacity_problem(self.device, request.size)
            if cannot_keep:  # known before sending: refused for this device, not sent
                request.done = True
                _bump(self.counters.knowledge_refused, Reason.STORAGE.name.lower())
                self._finish_knowledge(request, None, Reason.STORAGE, None, cannot_keep)
                return
        self._queue.append(item)

    def _fail(self, request: _Request, reason: str) -> None:
        if request.done:
            return
        request.done = True
        if request in self._status_waiting:
            self._status_waiting.remove(request)
        if request.kind == "knowledge":
            self._finish_knowledge(request, None, Reason.NONE, None, reason)
            return
        self.counters.requests_failed += 1
        if request.token is not None:
            self._events.append(RequestFailed(request.token, request.kind, reason))

    def _finish_knowledge(
        self,
        job: _Request,
        status: PackStatus | None,
        reason: Reason,
        held: int | None,
        detail: str,
    ) -> None:
        job.done = True
        if job in self._knowledge:
            self._knowledge.remove(job)
        assert job.token is not None
        self._events.append(
            KnowledgeDone(job.token, job.pack_id, job.seq, status, reason, held, detail)
        )

    def _service(self, now: int) -> None:
        self._pump(now)
        if self._ack_at is not None and now >= self._ack_at and self._phase is not _Phase.IDLE:
            self._send_unsequenced(Ack())
            self.counters.acks_out += 1

    def _pump(self, now: int) -> None:
        if self._phase is not _Phase.OPEN:
            return
        while self._queue and len(self._unacked) < self._window:
            if self._next_seq > U32:
                self._lose("sequence numbers exhausted (2^32 - 1): the device must start over")
                return
            item = self._queue[0]
            if item.request is not None and item.request.done:
                self._queue.popleft()
                continue
            message = item.message
            if isinstance(message, PackResult):  # named relative to the ack it carries
                back = self._expected - 1 - item.offer
                message = PackResult(back, message.status, message.reason)
            body = encode_message(message, self._next_seq, self._expected - 1)
            self._queue.popleft()
            self._mark_sent(item, self._next_seq)
            _bump(self.counters.messages_out, item.message.TYPE.name)
            self._send_sequenced(body, self._next_seq)

    def _mark_sent(self, item: _Out, ref: int) -> None:
        request = item.request
        if request is None:
            return
        request.ref = ref
        self._sent[ref] = request
        if request.kind == "status":
            self._status_waiting.append(request)
        elif request.kind == "capture":
            self.counters.captures_sent += 1
        elif request.kind == "knowledge":
            self.counters.knowledge_pushed += 1

    def _send_sequenced(self, body: bytes, seq: int) -> None:
        self._unacked.append((seq, body))
        self._next_seq = seq + 1
        self._ack_at = None  # the body carries the current ack
        self._write(body)
        if self._timer_at is None:
            self._timer_at = self._now + self._rto

    def _send_unsequenced(self, message: Message) -> None:
        ack = self._expected - 1 if self._phase is not _Phase.IDLE else 0
        self._ack_at = None
        _bump(self.counters.messages_out, message.TYPE.name)
        self._write(encode_message(message, 0, ack))

    def _send_error(self, code: int, ref: int, detail: str) -> None:
        limit = MAX_TEXT if self._phase is _Phase.OPEN else PRE_SESSION_TEXT
        self._send_unsequenced(ErrorMsg(int(code), ref, _cut(detail, limit)))

    def _owe_ack(self) -> None:
        if self._ack_at is None:
            self._ack_at = self._now + self.config.ack_delay_ms

    def _write(self, body: bytes) -> None:
        """Frame a body: one frame, or its pieces when it does not fit one (§6.8)."""
        cut = pieces.split(body, self._max_frame)
        if len(cut) > 1:
            self.counters.fragments_out += len(cut)
        for piece in cut:
            frame = encode_frame(piece, self._max_frame)
            if self._flush_line:
                frame = b"\x00" + frame
                self._flush_line = False
            self.counters.frames_out += 1
            self.counters.bytes_out += len(frame)
            self._out += frame

    def _on_timeout(self, now: int) -> None:
        self._timeouts += 1
        self.counters.timeouts += 1
        if self._timeouts >= MAX_TIMEOUTS:
            self._lose(f"no acknowledgement after {MAX_TIMEOUTS} retransmission timeouts")
            return
        self._rto = min(2 * self._rto, RTO_MAX_MS)
        for _, body in self._unacked:
            self.counters.retransmissions += 1
            self._write(body)
        self._timer_at = now + self._rto

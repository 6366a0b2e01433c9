"""The device agent: session, reliability and offload (SPEC 6; firmware/core/hm_agent.h).

Driving it: Agent(config, write) then start() (writes 00 and HELLO); input(bytes) for
bytes from the line in any chunking; poll() at least every few ms for the timers
(retransmission, delayed ack, HELLO resends, offload policy, periodic STATUS);
capture(...) for the device's own sensor; log(level, text). knowledge_saved(seq, hash),
if given, is called when a knowledge pack is accepted, before its KNOWLEDGE_RESULT is
queued: keep seq and hash where they survive a reset and give them back as
Config.knowledge_seq / knowledge_hash (rollback protection across boots).

Session rules as in hm_agent.h: without a session only HELLO (seq 1, ack 0, resent
at 250 ms doubling to 4 s, then every 4 s), LOG and ERROR malformed for a bad
HELLO_ACK are written, and nothing is acknowledged. Sequenced messages are encoded
once with the ack current at that moment, sent as the window allows and resent
byte-identical (go-back-N) on timeout; RTO 250 ms doubling to 4 s, reset when an ack
advances; the 8th consecutive timeout ends the session. An owed ack rides on the
next new frame or leaves as an ACK after 20 ms. One PACK_OFFER at a time, one seq,
in frame pieces when it does not fit one frame (frag.py; a body from the host is
joined the same way); PACK_RESULTs are matched to offers in order. A request (CAPTURE,
KNOWLEDGE_PUSH or STATUS_REQUEST) that finds the outgoing queue full is
answered ERROR busy and not delivered. Before a seq would reach 2^32 - 1 the session
ends (HELLO again, SPEC 6.1); the ring refuses captures (full) once its record seq
reached 2^32 - 1.
"""

import time
from hashlib import sha256

from micropython import const

from . import frag, frames, msg, pack
from .cbor import utf8_valid
from .packer import KNOWLEDGE_CAPACITY, KNOWLEDGE_TEXT, Knowledge, Packer
from .ring import Ring

ACK_DELAY_MS = const(20)
RTO_MS = const(250)
RTO_MAX_MS = const(4000)
MAX_TIMEOUTS = const(8)
DEFER_MS = const(4000)
QUEUE = const(6)
OWN_RESERVE = const(2)  # as HM_AGENT_OWN_RESERVE
PACK_CAP = const(1536)
MAX_FRAME = const(512)
SEQ_LAST = const(0xFFFFFFFF)
PROOF_LABEL = b"hirmem session proof v1"

CAP_CAPTURE = const(0x01)
CAP_KNOWLEDGE = const(0x02)
CAP_SENSOR = const(0x04)
CAP_FRAGMENTS = const(0x08)
CAP_STATUS = const(0x10)


class Config:
    """What a board provisions (the deploy tool writes hirmem_config.py)."""

    def __init__(self, device_id: bytes, seed: bytes, host_public=None, host_id=None,
                 board: str = "micropython", firmware: str = "0.1.0", boot: int = 1,
                 capabilities: int = 0x1F, max_frame: int = 512, window: int = 4,
                 max_message: int = 4096, ring_capacity: int = 16, arena_size: int = 2048,
                 offer_threshold: int = 0, offer_period_ms: int = 0,
                 status_period_ms: int = 0, knowledge_seq: int = 0,
                 knowledge_hash=None) -> None:
        self.device_id = device_id
        self.seed = seed
        self.host_public = host_public
        self.host_id = host_id
        self.board = board
        self.firmware = firmware
        self.boot = boot
        self.capabilities = capabilities
        self.max_frame = max_frame
        self.window = window
        self.max_message = max_message
        self.ring_capacity = ring_capacity
        self.arena_size = arena_size
        self.offer_threshold = offer_threshold
        self.offer_period_ms = offer_period_ms
        self.status_period_ms = status_period_ms
        self.knowledge_seq = knowledge_seq  # persisted knowledge head (0: none)
        self.knowledge_hash = knowledge_hash  # its 32-byte hash, None with seq 0


class Agent:
    def __init__(self, cfg: Config, write, clock=None, knowledge_saved=None) -> None:
        from . import ed25519

        if not 128 <= cfg.max_frame <= MAX_FRAME or not 1 <= cfg.window <= 8:
            raise ValueError("max_frame must be 128..512 and window 1..8")
        if cfg.knowledge_seq and (cfg.knowledge_hash is None or len(cfg.knowledge_hash) != 32):
            raise ValueError("knowledge_seq needs its 32-byte knowledge_hash")
        self.cfg = cfg
        self.write = write
        self.knowledge_saved = knowledge_saved
        self.clock = clock if clock is not None else time.ticks_ms
        self._last_raw = self.clock()
        self.now = 0
        self.accepts = msg.device_accepts(cfg.capabilities)
        pub = ed25519.public_key(cfg.seed)
        self.kid = pack.kid_of(pub)
        host_key = None
        self.host_kid = b""
        if cfg.host_public is not None and cfg.host_id is not None:
            host_key = pack.TrustedKey(cfg.host_public, cfg.host_id, pack.KIND_KNOWLEDGE)
            self.host_kid = host_key.kid
        self.ring = Ring(cfg.device_id, cfg.boot, cfg.ring_capacity, cfg.arena_size)
        self.packer = Packer(cfg.device_id, cfg.boot, cfg.seed, self.kid)
        self.knowledge = Knowledge(host_key)
        if cfg.knowledge_seq:
            self.knowledge.set_head(cfg.knowledge_seq, cfg.knowledge_hash)
        self.rx = frames.FrameRx(cfg.max_frame, self._on_frame)
        self.joiner = frag.Joiner(cfg.max_message)
        self.wire = bytearray(frames.wire_bound(MAX_FRAME) + 1)
        self.crcbuf = bytearray(MAX_FRAME)
        self.hello = msg.encode(msg.HELLO, 1, 0, (
            cfg.device_id, cfg.board, cfg.firmware, cfg.boot, cfg.capabilities, cfg.max_frame,
            cfg.max_message, cfg.window, self.kid, self.host_kid)
            + ((KNOWLEDGE_CAPACITY, KNOWLEDGE_TEXT) if cfg.capabilities & CAP_KNOWLEDGE
               else (0, 0)))
        if len(self.hello) + 4 > 128:
            raise ValueError("HELLO does not fit 128 bytes: shorten board/firmware")
        # hashed once: HELLO_ACK echoes its first 16 bytes, PROOF signs all 32 (SPEC 5.3)
        self.hello_hash = sha256(self.hello).digest()
        # counters
        self.sessions = 0
        self.sessions_lost = 0
        self.hellos = 0
        self.delivered = 0
        self.duplicates = 0
        self.out_of_order = 0
        self.retransmits = 0
        self.timeouts_total = 0
        self.acks_sent = 0
        self.errors_sent = 0
        self.errors_rcvd = 0
        self.ignored = 0
        self.stale_hello_acks = 0  # HELLO_ACKs that answer another HELLO (SPEC 6.5)
        self.busy = 0
        self.offers = 0
        self.fragments = 0
        self.results_unmatched = 0
        self.logs = 0
        self.invalid = 0
        self.results_lost = 0
        self.knowledge_pushes = 0
        self.exhausted = 0
        self._no_session()

    # ---- clock and line ------------------------------------------------------------

    def _tick(self) -> None:
        raw = self.clock()
        self.now += time.ticks_diff(raw, self._last_raw)
        self._last_raw = raw

    def wall_ms(self) -> int:
        return self.now + self.wall_offset if self.wall_known else 0

    def _tx(self, body) -> None:
        for piece in frag.split(body, self.max_frame):
            n = frames.encode_frame_into(piece, len(piece), self.wire, self.crcbuf)
            self.write(memoryview(self.wire)[0:n])

    def _ack_now(self) -> int:
        return self.expected - 1 if self.session else 0

    # ---- session -------------------------------------------------------------------

    def _no_session(self) -> None:
        self.session = False
        self.max_frame = 128
        self.window = 1
        self.host_max_message = 0
        self.next_seq = 1
        self.expected = 1
        self.q = []  # [seq, body, ack, big] sequenced messages queued or unacked
        self.sent = 0  # entries of q transmitted at least once
        self.offered = []  # pack seqs offered, results due in order
        self.big = False
        self.rto = RTO_MS
        self.ntimeouts = 0
        self.timer_at = -1
        self.ack_due = False
        self.ack_at = 0
        self.hold_until = 0
        self.joiner.reset()
        self.rx.set_max_frame(self.cfg.max_frame)
        self.wall_known = getattr(self, "wall_known", False)
        self.wall_offset = getattr(self, "wall_offset", 0)
        self.last_offer = self.now
        self.last_status = self.now

    def start(self) -> None:
        self._tick()
        self.write(b"\x00")
        self._send_hello()

    def _send_hello(self) -> None:
        self._tx(self.hello)
        self.hellos += 1
        self.timer_at = self.now + self.rto

    def _lose_session(self) -> None:
        self.sessions_lost += 1
        self._no_session()
        self._send_hello()

    def _open_session(self, m: list) -> None:
        mf, mm, win, tms, pseq, phash = m[5], m[6], m[7], m[8], m[9], m[10]
        self.session = True
        self.sessions += 1
        self.max_frame = mf
        self.window = win
        self.host_max_message = mm
        self.host_id = m[4]
        self.next_seq = 2
        self.expected = 2
        self.rto = RTO_MS
        self.ntimeouts = 0
        self.timer_at = -1
        self.wall_offset = tms - self.now
        self.wall_known = True
        self.last_offer = self.now
        self.last_status = self.now
        self.hold_until = 0
        self.packer.set_head(self.ring, pseq, phash)
        self._owe_ack()
        self._queue(msg.PROOF, (self._proof(m[4], m[11]),))  # seq 2, carries the ack

    def _proof(self, host_id: bytes, challenge: bytes) -> bytes:
        """PROOF (SPEC 5.15): the device key over label, host id, the host's challenge,
        device id, boot (u32 BE) and SHA-256 of the HELLO as sent."""
        from . import ed25519

        cfg = self.cfg
        data = (PROOF_LABEL + host_id + challenge + cfg.device_id + cfg.boot.to_bytes(4, "big")
                + self.hello_hash)
        return ed25519.sign(cfg.seed, data)

    # ---- sending -------------------------------------------------------------------

    def _entries(self) -> int:
        n = 0
        for e in self.q:
            if not e[3]:
                n += 1
        return n + (1 if self.big else 0)

    def _exhausted(self, n: int) -> bool:
        """True (and the session ended) if n more seqs would reach 2^32 - 1 (SPEC 6.1)."""
        if self.next_seq + n - 1 < SEQ_LAST:
            return False
        self.exhausted += 1
        self._lose_session()
        return True

    def _queue(self, t: int, fields) -> None:
        if self._exhausted(1):
            return
        body = msg.encode(t, self.next_seq, self.expected - 1, fields)
        self.q.append([self.next_seq, body, self.expected - 1, False])
        self.next_seq += 1
        self._pump()

    def _pump(self) -> None:
        while self.sent < len(self.q) and self.sent < self.window:
            e = self.q[self.sent]
            self._tx(e[1])
            if e[2] == self.expected - 1:
                self.ack_due = False
            self.sent += 1
            if self.timer_at < 0:
                self.timer_at = self.now + self.rto

    def _owe_ack(self) -> None:
        if not self.ack_due:
            self.ack_due = True
            self.ack_at = self.now + ACK_DELAY_MS

    def _send_unsequenced(self, t: int, fields) -> None:
        self._tx(msg.encode(t, 0, self._ack_now(), fields))
        if self.session:
            self.ack_due = False

    def _error(self, code: int, ref: int, detail: str) -> None:
        self.errors_sent += 1
        self._send_unsequenced(msg.ERROR, (code, ref, detail[0:100]))

    def log(self, level: int, text: str) -> None:
        b = text.encode()
        limit = 240 if self.session else 100
        while len(b) > limit:
            text = text[:-1]
            b = text.encode()
        self.logs += 1
        self._send_unsequenced(msg.LOG, (level, text))

    def _process_ack(self, ack: int) -> None:
        if self.sent == 0:
            return
        if self.q[0][0] <= ack <= self.q[self.sent - 1][0]:
            k = 0
            while k < self.sent and self.q[k][0] <= ack:
                k += 1
            del self.q[0:k]
            self.sent -= k
            if self.big and not any(e[3] for e in self.q):
                self.big = False
            self.rto = RTO_MS
            self.ntimeouts = 0
            self.timer_at = self.now + self.rto if self.sent else -1
            self._pump()

    # ---- receiving -----------------------------------------------------------------

    def input(self, data) -> None:
        self._tick()
        self.rx.feed(data)

    def _on_frame(self, body) -> None:
        if frag.is_piece(body):
            n = self.joiner.take(body)
            if n == -1 and self.session:
                # too large: the one refusal a retransmission cannot cure (the others
                # are counted and left to go-back-N): answered, and delivered as
                # refused so that the session moves on
                seq = self.joiner.seq
                self._error(msg.E_TOO_LARGE, seq, "above max_message")
                if seq == self.expected:
                    self.expected += 1
                if 0 < seq < self.expected:
                    self._owe_ack()
            if n > 0:
                self._on_body(memoryview(self.joiner.buf)[0:n])
            return
        self._on_body(body)

    def _on_body(self, body) -> None:
        try:
            m = msg.decode(body, self.accepts)
        except msg.MsgError as e:
            is_error = len(body) >= 3 and 0x84 <= body[0] <= 0x97 and body[2] == msg.ERROR
            if self.session and not is_error:
                self._error(e.code, e.ref, e.detail)
            elif (not self.session and e.code == msg.E_MALFORMED and len(body) >= 3
                  and 0x84 <= body[0] <= 0x97 and body[2] == msg.HELLO_ACK):
                self._error(msg.E_MALFORMED, e.ref, "malformed HELLO_ACK")
            return
        t = m[1]
        if not self.session:
            if t == msg.HELLO_ACK and m[12] != self.hello_hash[:16]:
                self.stale_hello_acks += 1  # it answers another HELLO: ignored
            elif t == msg.HELLO_ACK:
                if (m[2] == 1 and m[3] == 1 and 128 <= m[5] <= self.cfg.max_frame
                        and 1 <= m[7] <= self.cfg.window):
                    self._open_session(m)
                else:
                    self._error(msg.E_MALFORMED, m[2], "HELLO_ACK beyond the offer")
            elif t == msg.ERROR:
                self.errors_rcvd += 1
            else:
                self.ignored += 1
            return
        self._process_ack(m[3])
        if t == msg.ERROR:
            self.errors_rcvd += 1
            if m[4] == msg.E_NO_SESSION:
                self._lose_session()
            return
        if t == msg.ACK:
            return
        seq = m[2]
        if seq == self.expected:
            if t in (msg.CAPTURE, msg.KNOWLEDGE_PUSH, msg.STATUS_REQUEST) and (
                    self._entries() >= QUEUE):
                self.busy += 1
                self._error(msg.E_BUSY, seq, "queue full")
                return
            self.expected += 1
            self.delivered += 1
            self._owe_ack()
            self._deliver(m, seq)
        elif seq < self.expected:
            self.duplicates += 1
            self._owe_ack()
        else:
            self.out_of_order += 1
            self._owe_ack()

    def _deliver(self, m: list, ref: int) -> None:
        t = m[1]
        if t == msg.CAPTURE:
            self._capture_msg(m, ref)
        elif t == msg.KNOWLEDGE_PUSH:
            self.knowledge_pushes += 1
            st, reason, pid = self.knowledge.accept(m[4])
            if st == pack.ACCEPTED and self.knowledge_saved is not None:
                # saved before the host hears of it: an ACCEPTED is never undone by a reset
                self.knowledge_saved(self.knowledge.seq, self.knowledge.hash)
            self._queue(msg.KNOWLEDGE_RESULT, (pid, st, reason, self.knowledge.seq))
        elif t == msg.STATUS_REQUEST:
            self._queue(msg.STATUS, self.status())
        elif t == msg.PACK_RESULT:
            if not self.offered:
                self.results_unmatched += 1
                return
            pseq = self.offered.pop(0)
            if m[5] == pack.DEFERRED:
                self.hold_until = self.now + DEFER_MS
            self.packer.result(self.ring, pseq, m[5], m[6])

    # ---- captures ------------------------------------------------------------------

    def _do_capture(self, payload, source: bytes, timestamp: int, context, flags: int, q: int,
                    p: int, prio: int):
        if flags & 0xF000 or len(source) > 64 or not utf8_valid(source) or q > 0x10000 or (
                p > 0x10000 or prio > 0x10000 or len(payload) > 256 or len(context) != 32):
            self.invalid += 1
            self.ring.captures += 1
            self.ring.refusals += 1
            return 2, -1
        if timestamp == 0:
            timestamp = self.wall_ms()
        i = self.ring.capture(payload, source, timestamp, context)
        if i < 0:
            return -i, -1
        self.ring.gate(i, flags, q, p, prio, True)
        return 0, i

    def _result_fields(self, ref: int, status: int, i: int):
        if status != 0:
            return (ref, status, b"", 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0)
        g = self.ring.slots[i].gate
        return (ref, 0, self.ring.record_id(i), g.flags, g.h, g.i, g.r, g.f, g.c, g.rn, g.w,
                g.verdict, g.hard, g.state)

    def _capture_msg(self, m: list, ref: int) -> None:
        st, i = self._do_capture(m[5], m[4].encode(), 0, m[6], m[7], m[8], m[9], m[10])
        self._queue(msg.CAPTURE_RESULT, self._result_fields(ref, st, i))

    def capture(self, payload, source, timestamp: int, context, flags: int, q: int, p: int,
                prio: int) -> int:
        """The device's own sensor; returns the CaptureStatus."""
        self._tick()
        st, i = self._do_capture(payload, bytes(source), timestamp, context, flags, q, p, prio)
        if self.cfg.capabilities & CAP_SENSOR:
            # own results leave OWN_RESERVE entries free: a pack offer and one answer
            if self.session and self._entries() + OWN_RESERVE < QUEUE:
                self._queue(msg.CAPTURE_RESULT, self._result_fields(0, st, i))
            else:
                self.results_lost += 1
        return st

    def status(self):
        r = self.ring
        return (self.now, r.used, r.capacity, r.captures, r.evictions, r.refusals,
                r.quarantines, r.candidates, self.packer.built, self.packer.acked,
                self.rx.good, self.rx.bad, self.retransmits, self.knowledge.seq)

    # ---- timers and offload --------------------------------------------------------

    def poll(self) -> None:
        self._tick()
        now = self.now
        if self.timer_at >= 0 and now >= self.timer_at:
            self.timeouts_total += 1
            if not self.session:
                self.rto = min(2 * self.rto, RTO_MAX_MS)
                self._send_hello()
            else:
                self.ntimeouts += 1
                if self.ntimeouts >= MAX_TIMEOUTS:
                    self._lose_session()
                    return
                self.rto = min(2 * self.rto, RTO_MAX_MS)
                for k in range(self.sent):
                    self._tx(self.q[k][1])
                self.retransmits += self.sent
                self.timer_at = now + self.rto
        if not self.session:
            return
        sp = self.cfg.status_period_ms
        if sp and now - self.last_status >= sp and self._entries() < QUEUE:
            self.last_status = now
            self._queue(msg.STATUS, self.status())
            if not self.session:  # the seqs ran out (_exhausted)
                return
        self._offload()
        if self.ack_due and now >= self.ack_at:
            self.acks_sent += 1
            self._send_unsequenced(msg.ACK, ())

    def _offload(self) -> None:
        if self.big or self.now < self.hold_until or self._entries() >= QUEUE:
            return
        thr = self.cfg.offer_threshold
        per = self.cfg.offer_period_ms
        if not thr and not per:
            return
        n = len(self.ring.packable())
        if not n or not ((thr and n >= thr) or (per and self.now - self.last_offer >= per)):
            return
        self.offer_pack()

    def offer_pack(self) -> int:
        """Build, sign and queue one PACK_OFFER now; its pack seq, or 0."""
        cap = min(PACK_CAP, self.host_max_message - 16)  # 16: the widest PACK_OFFER head
        built = self.packer.build(self.ring, self.wall_ms(), cap)
        if built is None:
            return 0
        data, pseq = built
        body = msg.encode(msg.PACK_OFFER, self.next_seq, self.expected - 1, (data,))
        if self._exhausted(1):  # the pack is abandoned at the next HELLO_ACK head
            return 0
        self.last_offer = self.now
        self.offers += 1
        self.offered.append(pseq)
        pieces = len(frag.split(body, self.max_frame))
        if pieces > 1:
            self.fragments += pieces
        self.q.append([self.next_seq, body, self.expected - 1, True])
        self.next_seq += 1
        self.big = True
        self._pump()
        return pseq

"""The real C device agent (build/host/t_agent) as the peer of a host Session.

:class:`Agent` drives t_agent one request line at a time (see tests/native/t_agent.c);
:class:`Bench` shuttles bytes between it and a :class:`hirmem.link.session.Session` on one
shared virtual clock: each step advances the agent's clock and the session's by the
same amount. :class:`Tap` sits on each direction of the line and can drop, damage,
duplicate or inject frames, so faults are real bytes on a real wire.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar, cast

from conftest import DEVICE_ID, DEVICE_KEY, HOST_ID, HOST_KEY
from hirmem.link.session import Event, MemoryIntake, Session, SessionConfig
from hirmem.protocol import pieces
from hirmem.protocol.errors import FrameError, MessageError
from hirmem.protocol.frames import decode_frame
from hirmem.protocol.messages import Message, decode_message
from hirmem.protocol.packs import PackKind, TrustedKey
from native_harness import BUILD, Arg, build, encode_arg

ALL_CAPS = 0x1F
T0 = 1_780_000_000_000  # the host's wall clock at virtual time 0
MEMORY_KEYS = {DEVICE_KEY.kid: TrustedKey(DEVICE_KEY.public, DEVICE_ID, PackKind.MEMORY)}


class Agent:
    """build/host/t_agent: one hm_agent with a virtual clock."""

    def __init__(self) -> None:
        build()
        self.proc = subprocess.Popen(
            [str(BUILD / "t_agent")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def request(self, cmd: str, *args: Arg) -> list[str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(" ".join([cmd, *(encode_arg(a) for a in args)]) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=10)
            assert self.proc.stderr is not None
            raise AssertionError(
                f"t_agent died ({self.proc.returncode}): {self.proc.stderr.read()}"
            )
        return line.split()

    def out(self, cmd: str, *args: Arg) -> bytes:
        """A request whose last answer field is the bytes the agent wrote."""
        return bytes.fromhex(self.request(cmd, *args)[-1][1:])

    def init(
        self,
        *,
        boot: int = 7,
        caps: int = ALL_CAPS,
        max_frame: int = 512,
        window: int = 4,
        max_message: int = 4096,
        offer_n: int = 0,
        offer_t: int = 0,
        status_t: int = 0,
        ring: int = 0,
        host_key: bool = True,
        public_key: bytes | None = None,
    ) -> bytes:
        """hm_agent_init; public_key: the device key's public half as a key slot gives it
        (None: the agent derives it)."""
        keys: list[Arg] = (
            [HOST_KEY.public.raw, HOST_KEY.kid, HOST_ID] if host_key else [b"", b"", b""]
        )
        slot_key: list[Arg] = [] if public_key is None else [public_key]
        answer = self.request(
            "init", DEVICE_ID, boot, caps, max_frame, window, max_message,
            offer_n, offer_t, status_t, DEVICE_KEY.seed(), *keys, ring, *slot_key,
        )  # fmt: skip
        assert answer[0] == "ok", answer
        return bytes.fromhex(answer[1][1:])

    def capture(self, payload: bytes, source: bytes, flags: int, q: int, p: int) -> bytes:
        """The device's own sensor (CAPTURE_RESULT ref 0); returns the bytes written."""
        context = bytes(32)
        answer = self.request("capture", payload, source, 0, context, flags, q, p, 0x8000)
        return bytes.fromhex(answer[1][1:])

    def status(self) -> dict[str, int]:
        fields = self.request("status")
        return {fields[i]: int(fields[i + 1]) for i in range(0, len(fields), 2)}

    def state(self) -> list[int]:
        return [int(x) for x in self.request("state")]

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        err = self.proc.stderr.read()
        assert self.proc.returncode == 0 and "runtime error" not in err, err


Fault = Callable[[bytes], bytes]
E = TypeVar("E")


def is_piece_frame(frame: bytes) -> bool:
    """Whether a wire frame (delimiter included) carries a piece of a longer body."""
    try:
        return pieces.is_piece(decode_frame(frame, 0xFFFF))
    except FrameError:
        return False


def message_of(frame: bytes) -> Message | None:
    """The message a wire frame carries (delimiter included), None if it is damaged."""
    try:
        return decode_message(decode_frame(frame, 0xFFFF)).message
    except (FrameError, MessageError):
        return None


@dataclass
class Tap:
    """One direction of the line, cut into frames at each 00; ``fault`` may rewrite each.

    ``fault(frame) -> bytes`` gets every complete frame with its delimiter (a lone 00
    is an empty frame) and returns what goes on: the frame, nothing, damaged or
    repeated bytes. ``frames`` counts what passed through, ``dropped`` what a fault
    replaced with nothing.
    """

    fault: Fault | None = None
    frames: int = 0
    dropped: int = 0
    _partial: bytearray = field(default_factory=bytearray)

    def feed(self, chunk: bytes) -> bytes:
        out = bytearray()
        for byte in chunk:
            self._partial.append(byte)
            if byte != 0:
                continue
            frame = bytes(self._partial)
            self._partial.clear()
            self.frames += 1
            passed = frame if self.fault is None else self.fault(frame)
            if not passed:
                self.dropped += 1
            out += passed
        return bytes(out)


class Bench:
    """A Session and a t_agent joined by two Taps on one virtual clock."""

    def __init__(
        self,
        agent: Agent,
        *,
        intake: MemoryIntake | None = None,
        config: SessionConfig | None = None,
    ) -> None:
        self.agent = agent
        self.now = 0
        self.intake = intake if intake is not None else MemoryIntake(MEMORY_KEYS)
        self.config = config if config is not None else SessionConfig(HOST_ID)
        self.session = Session(self.config, self.intake, wall_ms=lambda: T0 + self.now)
        self.d2h = Tap()  # device to host
        self.h2d = Tap()  # host to device
        self.events: list[Event] = []
        self.device_bytes = 0  # bytes the agent wrote (before the tap)

    def start(self, **init: int | bool) -> None:
        """(Re)initialise the agent (a boot) and hand its first bytes to the line."""
        self.from_device(self.agent.init(**init))  # type: ignore[arg-type]

    def from_device(self, data: bytes) -> None:
        """Bytes the agent wrote: through the taps, back and forth until quiet."""
        pending = data
        while True:
            self.device_bytes += len(pending)
            passed = self.d2h.feed(pending) if pending else b""
            if passed:
                self.session.feed(passed, self.now)
            self.events += self.session.take_events()
            out = self.session.take_output()
            if not out:
                return
            to_device = self.h2d.feed(out)
            if not to_device:
                return
            pending = self.agent.out("input", to_device)
            if not pending:
                return

    def flush(self) -> None:
        """Send whatever the session has queued (after a request call)."""
        self.session.poll(self.now)
        self.from_device(b"")

    def run(self, ms: int, step: int = 1) -> None:
        """Advance both clocks by ``ms``, ``step`` at a time, shuttling bytes after each."""
        for _ in range(0, ms, step):
            self.now += step
            out = self.agent.out("advance", step)
            self.from_device(out)
            self.session.poll(self.now)
            self.from_device(b"")

    def run_until(self, done: Callable[[], bool], limit_ms: int, step: int = 1) -> None:
        waited = 0
        while not done():
            if waited >= limit_ms:
                raise AssertionError(f"condition not reached within {limit_ms} ms (virtual)")
            self.run(step, step)
            waited += step

    def take(self, kind: type[E]) -> list[E]:
        """The events of one kind so far, removed from ``events``."""
        self.events += self.session.take_events()
        got = [cast(E, e) for e in self.events if isinstance(e, kind)]
        self.events = [e for e in self.events if not isinstance(e, kind)]
        return got

    def seen(self, kind: type[object]) -> int:
        self.events += self.session.take_events()
        return sum(isinstance(e, kind) for e in self.events)

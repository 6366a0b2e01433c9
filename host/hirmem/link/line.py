"""Drive a :class:`~hirmem.link.session.Session` over a :class:`~hirmem.link.transport.Transport`.

:class:`Link` is the blocking loop around the sans-IO session: read what the line
has (waiting no longer than the session's next timer), feed it with a monotonic
millisecond clock, poll the timers, write the output, hand the events on. Run it in
its own thread (``threading.Thread(target=link.run)``) and end it with
:meth:`Link.stop`; requests from other threads go through :meth:`Link.call`, which
holds the same lock as the loop, so the session is only ever touched by one thread
at a time, or :meth:`Link.post`, which never waits: the loop runs the action on its
next turn (within ``max_wait_s``). ``after_step`` (optional) runs on the loop's thread
after every turn: what must look at the line as it is read (a flood) goes there.

Bytes leave in order and never under the session lock: output taken from the session
is appended to one queue, and whoever holds the write lock drains it. A line whose
peer stops reading therefore blocks only its own writer (until the transport's write
deadline), never a thread that merely posts a request.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TypeVar

from hirmem.link.session import Event, Session
from hirmem.link.transport import Transport, TransportClosed

T = TypeVar("T")

MAX_WAIT_S = 0.05  # the loop looks at stop() and requests at least this often
# What one turn hands the session of what was read (a read takes up to 64 KiB): the
# rest waits for the next turns, which do not read. So ``after_step`` sees a flood
# after a few hundred frames at most, not after a whole read of them: a peer that
# floods the host costs a slice of parsing per pause, and the interpreter's lock
# is never held for a whole read's worth of frames.
FEED_SLICE = 4096


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class Link:
    """One device: a session on a transport, with a real clock."""

    def __init__(
        self,
        transport: Transport,
        session: Session,
        *,
        on_event: Callable[[Event], None] | None = None,
        clock_ms: Callable[[], int] = monotonic_ms,
        max_wait_s: float = MAX_WAIT_S,
        after_step: Callable[[], None] | None = None,
    ) -> None:
        self.transport = transport
        self.session = session
        self.on_event = on_event
        self.events: deque[Event] = deque()  # when no on_event callback is given
        self._clock_ms = clock_ms
        self._max_wait_s = max_wait_s
        self._lock = threading.RLock()  # the session
        self._write_lock = threading.Lock()  # the transport's write side
        self._unsent = bytearray()  # output taken from the session, not yet written
        self._posted: deque[Callable[[Session], object]] = deque()
        self._stop = threading.Event()
        self._paused_until = 0.0  # time.monotonic(): do not read before this
        self._unfed = bytearray()  # read from the line, not yet fed to the session
        self._after_step = after_step  # on the loop's thread, after every turn

    def now_ms(self) -> int:
        return self._clock_ms()

    def stop(self) -> None:
        """Ask :meth:`run` to return (within ``max_wait_s``); safe from any thread."""
        self._stop.set()

    def pause_reading(self, seconds: float) -> None:
        """Read nothing from the line for ``seconds`` (timers and writes go on); safe from
        any thread. What the peer sends meanwhile waits in the kernel's buffers, and a
        peer that keeps sending is held back by them."""
        self._paused_until = max(self._paused_until, time.monotonic() + seconds)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def call(self, action: Callable[[Session], T]) -> T:
        """Run ``action(session)`` under the loop's lock and send what it queued."""
        with self._lock:
            result = action(self.session)
            events = self._flush(self.now_ms())
        self._send()
        self._dispatch(events)  # e.g. the SessionLost of a drop()
        return result

    def post(self, action: Callable[[Session], object]) -> None:
        """Have the loop run ``action(session)`` on its thread; returns at once.

        Its result is dropped: an action that needs one keeps it itself. An exception
        from it is raised in the loop (as one from :meth:`step`).
        """
        self._posted.append(action)

    def open(self) -> None:
        """Open the transport (if needed) and tell the session the line is new."""
        with self._lock:
            if not self.transport.is_open:
                self.transport.open()
                self.session.line_reconnected()

    def step(self) -> None:
        """One turn of the loop: read (bounded by the next timer), feed, poll, write."""
        with self._lock:
            deadline = self.session.next_deadline()
            now = self.now_ms()
        wait = self._max_wait_s
        if deadline is not None:
            wait = min(wait, max(0.0, (deadline - now) / 1000))
        pause = self._paused_until - time.monotonic()
        if pause > 0:
            self._stop.wait(min(wait, pause))
            data = b""
        elif self._unfed:
            data = b""  # the last read is fed first
        else:
            data = self.transport.read(wait)
        with self._lock:
            now = self.now_ms()
            self._unfed += data
            if self._unfed and pause <= 0:
                piece = bytes(self._unfed[:FEED_SLICE])
                del self._unfed[:FEED_SLICE]
                self.session.feed(piece, now)
            while self._posted:
                self._posted.popleft()(self.session)
            self.session.poll(now)
            events = self._flush(now)
        self._send()
        self._dispatch(events)
        if self._after_step is not None:
            self._after_step()

    def run(self) -> None:
        """Loop until :meth:`stop`; the transport is closed on the way out.

        A line that goes away (TransportClosed) ends the session and is raised, so the
        caller can reopen with its own backoff and call :meth:`run` again.
        """
        self._stop.clear()
        self.open()
        try:
            while not self._stop.is_set():
                self.step()
        except TransportClosed as exc:
            with self._lock:
                self._unsent.clear()  # for a line that is gone
                self.session.drop(f"line closed: {exc}")
                events = self.session.take_events()
            self._dispatch(events)
            raise
        finally:
            self.transport.close()

    def _flush(self, now: int) -> list[Event]:
        """Under the session lock: queue the session's output, take its events."""
        del now
        self._unsent += self.session.take_output()
        return self.session.take_events()

    def _send(self) -> None:
        """Write the queued output in order, outside the session lock."""
        with self._write_lock:
            while True:
                with self._lock:
                    out = bytes(self._unsent)
                    self._unsent.clear()
                if not out:
                    return
                self.transport.write(out)

    def _dispatch(self, events: list[Event]) -> None:
        for event in events:
            if self.on_event is not None:
                self.on_event(event)
            else:
                self.events.append(event)

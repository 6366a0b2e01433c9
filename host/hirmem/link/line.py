"""Drive a :class:`~hirmem.link.session.Session` over a :class:`~hirmem.link.transport.Transport`.

:class:`Link` is the blocking loop around the sans-IO session: read what the line
has (waiting no longer than the session's next timer), feed it with a monotonic
millisecond clock, poll the timers, write the output, hand the events on. Run it in
its own thread (``threading.Thread(target=link.run)``) and end it with
:meth:`Link.stop`; requests from other threads go through :meth:`Link.call`, which
holds the same lock as the loop, so the session is only ever touched by one thread
at a time and its bytes leave in order.
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
    ) -> None:
        self.transport = transport
        self.session = session
        self.on_event = on_event
        self.events: deque[Event] = deque()  # when no on_event callback is given
        self._clock_ms = clock_ms
        self._max_wait_s = max_wait_s
        self._lock = threading.RLock()
        self._stop = threading.Event()

    def now_ms(self) -> int:
        return self._clock_ms()

    def stop(self) -> None:
        """Ask :meth:`run` to return (within ``max_wait_s``); safe from any thread."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def call(self, action: Callable[[Session], T]) -> T:
        """Run ``action(session)`` under the loop's lock and send what it queued."""
        with self._lock:
            result = action(self.session)
            events = self._flush(self.now_ms())
        self._dispatch(events)  # e.g. the SessionLost of a drop()
        return result

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
        data = self.transport.read(wait)
        with self._lock:
            now = self.now_ms()
            if data:
                self.session.feed(data, now)
            self.session.poll(now)
            events = self._flush(now)
        self._dispatch(events)

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
                self.session.drop(f"line closed: {exc}")
                events = self.session.take_events()
            self._dispatch(events)
            raise
        finally:
            self.transport.close()

    def _flush(self, now: int) -> list[Event]:
        del now
        out = self.session.take_output()
        if out:
            self.transport.write(out)
        return self.session.take_events()

    def _dispatch(self, events: list[Event]) -> None:
        for event in events:
            if self.on_event is not None:
                self.on_event(event)
            else:
                self.events.append(event)

"""Concurrent recalls answered together: one :meth:`MemoryEngine.recall_batch` for the
queries that arrive while another batch runs.

A recall over N memories is one pass over the index (E @ q) under the engine's writer,
so concurrent requests would each wait for the others' passes. Here the first request
becomes the leader: it takes the queries waiting (up to ``max_batch``, of the same
``touch``), runs them as one batch (one pass for all of them, top ``max(k)``), and hands
each its own answer, its first k hits; the next leader takes what came meanwhile. The
top k of a longer ranking are the ranking's first k, so a request gets what it would
alone.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from hirmem.memory.engine import MemoryEngine
from hirmem.memory.recall import RecallHit


@dataclass
class _Ask:
    query: str
    k: int
    touch: bool
    done: threading.Event = field(default_factory=threading.Event)
    hits: list[RecallHit] | None = None
    error: BaseException | None = None


class RecallBatcher:
    def __init__(self, engine: MemoryEngine, max_batch: int = 64) -> None:
        self.engine, self.max_batch = engine, max_batch
        self._lock = threading.Lock()
        self._waiting: list[_Ask] = []
        self._running = False
        self.batches = 0  # how many batches ran (a figure for tests and benchmarks)
        self.largest = 0

    def recall(self, query: str, k: int, touch: bool) -> list[RecallHit]:
        ask = _Ask(query, k, touch)
        with self._lock:
            self._waiting.append(ask)
            lead = not self._running
            if lead:
                self._running = True
        if lead:
            self._lead()
        ask.done.wait()
        if ask.error is not None:
            raise ask.error
        assert ask.hits is not None
        return ask.hits

    def _lead(self) -> None:
        """Run batches until nothing waits, then give up the lead."""
        while True:
            with self._lock:
                if not self._waiting:
                    self._running = False
                    return
                touch = self._waiting[0].touch
                batch = [a for a in self._waiting if a.touch == touch][: self.max_batch]
                taken = {id(a) for a in batch}
                self._waiting = [a for a in self._waiting if id(a) not in taken]
            self.batches += 1
            self.largest = max(self.largest, len(batch))
            try:
                results = self.engine.recall_batch([a.query for a in batch],
                                                   max(a.k for a in batch), touch=touch)
                for a, hits in zip(batch, results, strict=True):
                    a.hits = hits[: a.k]
            except BaseException as exc:  # every asker hears of it, not only the leader
                for a in batch:
                    a.error = exc
            for a in batch:
                a.done.set()

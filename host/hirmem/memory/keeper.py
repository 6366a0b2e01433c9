"""The daemon's memory: follow the intake and run the decay scheduler on an interval.

``hirmem daemon`` builds one :class:`MemoryKeeper` (unless ``memory_every = 0``) and
calls :meth:`MemoryKeeper.tick` from a thread of its own every ``memory_every`` seconds:
each tick admits the packs stored since the last one (:func:`follow_intake`) and lets
the :class:`~hirmem.memory.dynamics.DecayScheduler` sweep when ``sweep_interval_s` has
passed. Everything goes through the engine's one writer, so a ``hirmem memory``
command run beside the daemon (its own process, WAL) never breaks the chain.
:meth:`close` runs at the daemon's stop: the engine signs a checkpoint of the audit
chain's head with the host key (``[host] key``) and closes. A failed tick is counted
and logged; the next tick retries (follow resumes from its cursor).

``hirmem daemon`` imports and opens the keeper from the memory thread's first tick, so
the device lines start serving at once rather than after the memory (numpy, the
recall index) has loaded.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from hirmem.protocol.errors import HirmemError

if TYPE_CHECKING:
    from hirmem.daemon.reader import IntakeReader
    from hirmem.memory.config import MemoryConfig
    from hirmem.memory.engine import MemoryEngine
    from hirmem.memory.follow import FollowReport
    from hirmem.protocol.keys import SigningKey

__all__ = ["Figure", "KeeperCounters", "MemoryKeeper"]

log = logging.getLogger("hirmem.memory")

Opener = Callable[[ExitStack], "tuple[MemoryEngine, IntakeReader]"]


@dataclass
class KeeperCounters:
    ticks: int = 0
    failed_ticks: int = 0
    packs: int = 0
    admitted: int = 0
    quarantined: int = 0
    sweeps: int = 0


class Figure(NamedTuple):
    """One figure for the daemon's metrics (``hirmem_memory_<name>``)."""

    name: str
    kind: str  # "counter" or "gauge"
    help: str
    value: float
    labels: tuple[tuple[str, str], ...] = ()


_COUNTER_HELP = {
    "ticks": "Memory ticks run (follow the intake, then decay when due).",
    "failed_ticks": "Memory ticks that failed after the store opened (the next one retries).",
    "packs": "Intake packs the memory followed.",
    "admitted": "Device records admitted into the memory.",
    "quarantined": "Device records the memory engine quarantined at admission.",
    "sweeps": "Decay sweeps run.",
}


class MemoryKeeper:
    """Follow + decay for one engine over one intake store."""

    name = "memory"

    def __init__(
        self, engine: MemoryEngine | None, intake: IntakeReader | None, interval: float
    ) -> None:
        self._engine = engine
        self._intake = intake
        self.interval = interval
        self.counters = KeeperCounters()
        self._stack = ExitStack()
        self._opener: Opener | None = None

    @property
    def engine(self) -> MemoryEngine:
        self._open()
        assert self._engine is not None
        return self._engine

    @classmethod
    def open(
        cls,
        memory: Path,
        intake: Path,
        interval: float,
        config: MemoryConfig | None = None,
        key: SigningKey | None = None,
    ) -> MemoryKeeper:
        """Open the memory store at ``memory`` and a reader on the daemon's ``intake``
        now; ``key`` (the host key) signs the audit checkpoints (default:
        ``<memory>.key``)."""
        def opener(stack: ExitStack) -> tuple[MemoryEngine, IntakeReader]:
            from hirmem.daemon.reader import open_intake
            from hirmem.memory.engine import MemoryEngine

            engine = MemoryEngine(memory, config, signing_key=key)
            stack.callback(engine.close)
            return engine, stack.enter_context(open_intake(intake))

        keeper = cls(None, None, interval)
        keeper._opener = opener
        keeper._open()
        return keeper

    def _open(self) -> None:
        if self._engine is not None:
            return
        if self._opener is None:
            raise HirmemError("the memory keeper has no store to open")
        stack = ExitStack()
        try:
            self._engine, self._intake = self._opener(stack)
        except BaseException:
            stack.close()
            raise
        self._stack = stack

    def tick(self) -> FollowReport:
        from hirmem.memory.follow import follow_intake

        self.counters.ticks += 1
        try:
            engine = self.engine
            assert self._intake is not None
            report = follow_intake(engine, self._intake)
            swept = engine.scheduler.tick()
        except Exception:
            self.counters.failed_ticks += 1
            raise
        c = self.counters
        c.packs += report.packs
        c.admitted += report.admitted
        c.quarantined += report.quarantined
        c.sweeps += int(swept)
        if report.packs or swept:
            log.info(
                "memory tick",
                extra={"ctx": {"packs": report.packs, "admitted": report.admitted,
                               "quarantined": report.quarantined, "swept": swept}},
            )  # fmt: skip
        return report

    def figures(self) -> list[Figure]:
        """Its counters, and once the store is open the memories by lifecycle state
        (the quarantine among them), for the daemon's ``/metrics``."""
        out = [
            Figure(name, "counter", help_text, getattr(self.counters, name))
            for name, help_text in _COUNTER_HELP.items()
        ]
        if self._engine is not None:
            for state, n in self._engine.stats()["states"].items():
                out.append(Figure("memories", "gauge", "Memories by lifecycle state.", n,
                                  (("state", state),)))  # fmt: skip
        return out

    def close(self) -> None:
        """Checkpoint and close what the keeper opened (nothing if it never ticked)."""
        self._stack.close()

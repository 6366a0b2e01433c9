"""The daemon's memory: follow the intake and run the decay scheduler on an interval.

``hirmem daemon`` builds one :class:`MemoryKeeper` (unless ``memory_every = 0``) and
calls :meth:`MemoryKeeper.tick` from a thread of its own every ``memory_every`` seconds:
each tick admits the packs stored since the last one (:func:`follow_intake`) and lets
the :class:`~hirmem.memory.dynamics.DecayScheduler` sweep when ``sweep_interval_s`` has
passed. Everything goes through the engine's one writer, so a ``hirmem memory``
command run beside the daemon (its own process, WAL) never breaks the chain.
:meth:`close` runs at the daemon's stop: the engine signs a checkpoint of the audit
chain's head with the host key (``[host] key``) and closes. A failed tick is counted
and logged; the next tick retries (follow resumes from its cursor).
"""

from __future__ import annotations

import logging
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from hirmem.daemon.reader import IntakeReader, open_intake
from hirmem.memory.config import MemoryConfig
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.follow import FollowReport, follow_intake
from hirmem.protocol.keys import SigningKey

__all__ = ["KeeperCounters", "MemoryKeeper"]

log = logging.getLogger("hirmem.memory")


@dataclass
class KeeperCounters:
    ticks: int = 0
    failed_ticks: int = 0
    packs: int = 0
    admitted: int = 0
    quarantined: int = 0
    sweeps: int = 0


class MemoryKeeper:
    """Follow + decay for one engine over one intake store."""

    name = "memory"

    def __init__(self, engine: MemoryEngine, intake: IntakeReader, interval: float) -> None:
        self.engine = engine
        self.intake = intake
        self.interval = interval
        self.counters = KeeperCounters()
        self._stack = ExitStack()

    @classmethod
    def open(
        cls,
        memory: Path,
        intake: Path,
        interval: float,
        config: MemoryConfig | None = None,
        key: SigningKey | None = None,
    ) -> MemoryKeeper:
        """Open the memory store at ``memory`` and a reader on the daemon's ``intake``;
        ``key`` (the host key) signs the audit checkpoints (default: ``<memory>.key``)."""
        stack = ExitStack()
        engine = MemoryEngine(memory, config, signing_key=key)
        stack.callback(engine.close)
        try:
            reader = stack.enter_context(open_intake(intake))
        except BaseException:
            stack.close()
            raise
        keeper = cls(engine, reader, interval)
        keeper._stack = stack
        return keeper

    def tick(self) -> FollowReport:
        self.counters.ticks += 1
        try:
            report = follow_intake(self.engine, self.intake)
            swept = self.engine.scheduler.tick()
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

    def close(self) -> None:
        self._stack.close()

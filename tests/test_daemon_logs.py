"""What devices say reaches the daemon's log as one safe line each, and not without limit.

A device's LOG text is the device's to choose: it must not be able to forge a line
of the daemon's own (a newline, a Unicode line separator, non-breaking spaces that
look like the separators of ``key=value`` pairs), drive the operator's terminal
(escape sequences), or flood the log. The worker is driven with the session's
events directly, on a fake clock.

And ``--log-level debug`` says more than info: a daemon serving a simulated device
logs line states, traffic summaries, store commits, STATUS requests and reports at
debug, none of which reach an info log.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

import hirmem.daemon.service as service
from hirmem.daemon.config import build_config
from hirmem.daemon.service import (
    LOG_BURST,
    LOG_RATE,
    NOISE_PAUSE_MAX_S,
    NOISE_PAUSE_S,
    TRUST_HINT_EVERY_S,
    Daemon,
    RateLimit,
    StructuredFormatter,
    sanitise_device_text,
)
from hirmem.link.session import LogLine, PackDisposition, PackRefused
from hirmem.protocol.messages import LogLevel
from hirmem.protocol.packs import Reason
from test_daemon_faults import daemon_for, register, running, sim, wait_until

FORGED = (
    "ok\n2026-12-01T21:00:00.000Z info    daemon stopped\u00a0device=\u00a0x"
    "\u2028second\u2029third\x85fourth\x1b[2J\x1b]0;owned\x07\r\u202eevil\U0001f600\\x41"
)


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def worker_and_log(tmp_path: Path) -> tuple[Daemon, Lines]:
    config = build_config(
        {
            "host": {"id": "0102030405060708", "database": str(tmp_path / "l.db")},
            "device": [{"url": "socket://127.0.0.1:9", "name": "bench-m3"}],
        },
        tmp_path,
        [],
    )
    daemon = Daemon(config)
    lines = Lines()
    logger = logging.getLogger("hirmem.daemon")
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    return daemon, lines


def test_sanitised_text_is_printable_and_reversible_enough() -> None:
    clean = sanitise_device_text(FORGED)
    assert clean.isprintable()
    assert all(ch == " " or not ch.isspace() for ch in clean)
    assert "\\n2026" in clean and "\\u2028" in clean and "\\x1b[2J" in clean
    assert "\\u202e" in clean and "\\\\x41" in clean  # a backslash is escaped too
    assert "\U0001f600" in clean  # printable: kept
    assert sanitise_device_text("temp0 21.5 °C ok") == "temp0 21.5 °C ok"


def test_a_device_cannot_forge_a_daemon_line(tmp_path: Path) -> None:
    daemon, lines = worker_and_log(tmp_path)
    try:
        worker = daemon.workers[0]
        worker._on_event(LogLine(LogLevel.WARN, FORGED))
        (record,) = lines.records
        for as_json in (False, True):
            out = StructuredFormatter(as_json).format(record)
            assert "\n" not in out and "\r" not in out and out.isprintable(), out
            assert all(ch == " " or not ch.isspace() for ch in out), out
            assert "\x1b" not in out
        doc = json.loads(StructuredFormatter(True).format(record))
        # the device's level by name (it was the number 1), the configured name
        assert doc["level"] == "warn" and doc["event"] == "device log"
        assert doc["name"] == "bench-m3"
        assert doc["text"] == sanitise_device_text(FORGED)
    finally:
        logging.getLogger("hirmem.daemon").removeHandler(lines)
        daemon.stop()


def test_device_log_lines_are_rate_limited_and_the_rest_counted(tmp_path: Path) -> None:
    daemon, lines = worker_and_log(tmp_path)
    now = [0.0]
    try:
        worker = daemon.workers[0]
        worker.log_limit = RateLimit(LOG_RATE, LOG_BURST, clock=lambda: now[0])
        for n in range(1000):  # a flood at one instant
            worker._on_event(LogLine(LogLevel.INFO, f"line {n}"))
        assert len(lines.records) == LOG_BURST
        assert worker.counters()["device_logs_dropped"] == 1000 - LOG_BURST
        now[0] += 1.0  # one second later: LOG_RATE more
        for n in range(100):
            worker._on_event(LogLine(LogLevel.INFO, f"later {n}"))
        assert len(lines.records) == LOG_BURST + int(LOG_RATE)
        first_later = lines.records[LOG_BURST]
        assert first_later.ctx["dropped_before"] == 1000 - LOG_BURST  # type: ignore[attr-defined]
        assert worker.counters()["device_logs_dropped"] == 1100 - LOG_BURST - int(LOG_RATE)
    finally:
        logging.getLogger("hirmem.daemon").removeHandler(lines)
        daemon.stop()


def test_an_untrusted_device_gets_a_hint_not_a_flood(tmp_path: Path) -> None:
    """Packs from a device whose key is not registered: the log says how to trust it
    (`hirmem device add`), once per TRUST_HINT_EVERY_S, and the refusal lines
    themselves are rate-limited."""
    daemon, lines = worker_and_log(tmp_path)
    now = [0.0]
    try:
        worker = daemon.workers[0]
        worker._clock = lambda: now[0]
        worker.refusal_limit = RateLimit(LOG_RATE, LOG_BURST, clock=lambda: now[0])
        dev = bytes.fromhex("ee000000000000aa")
        refused = PackDisposition.refused(Reason.UNKNOWN_KEY, "key 0102… is not trusted")
        for _ in range(500):
            worker._on_event(PackRefused(dev, refused))
            now[0] += 0.01  # 100 offers a second for 5 s
        said = [r.getMessage() for r in lines.records]
        assert said.count("device not trusted") == 1
        assert said.count("pack refused") <= LOG_BURST + 5 * LOG_RATE + 1
        hint = next(r for r in lines.records if r.getMessage() == "device not trusted")
        text = hint.ctx["hint"]  # type: ignore[attr-defined]
        assert "hirmem device add" in text and dev.hex() in text
        now[0] += TRUST_HINT_EVERY_S
        worker._on_event(PackRefused(dev, refused))
        said = [r.getMessage() for r in lines.records]
        assert said.count("device not trusted") == 2
    finally:
        logging.getLogger("hirmem.daemon").removeHandler(lines)
        daemon.stop()


class PauseLog:
    """Stands in for the worker's link: records the pauses asked of it."""

    def __init__(self) -> None:
        self.pauses: list[float] = []

    def pause_reading(self, seconds: float) -> None:
        self.pauses.append(seconds)


def test_a_flooding_line_is_paused_longer_while_it_keeps_flooding(tmp_path: Path) -> None:
    daemon, lines = worker_and_log(tmp_path)
    try:
        worker = daemon.workers[0]
        link = PauseLog()
        worker.link = link  # type: ignore[assignment]
        refused = worker.session.counters.refused_in
        t = 0.0
        for _ in range(40):  # 40 s of 1,000 refused frames a second while it is read
            t += 1.0
            if t >= worker._paused_until:
                refused["unknown-type"] = refused.get("unknown-type", 0) + 1000
            worker._quieten(t)
        assert link.pauses[:5] == [1.0, 2.0, 4.0, 8.0, 16.0]
        assert max(link.pauses) == NOISE_PAUSE_MAX_S
        assert worker.counters()["line_pauses"] == len(link.pauses)
        quiet = len(link.pauses)
        for _ in range(5):  # quiet again: no pause, and the next one starts short
            t += 31.0
            worker._quieten(t)
        assert len(link.pauses) == quiet
        refused["unknown-type"] += 1000
        worker._quieten(t + 1.0)
        assert link.pauses[-1] == NOISE_PAUSE_S
    finally:
        logging.getLogger("hirmem.daemon").removeHandler(lines)
        daemon.stop()


def served_log(tmp_path: Path, level: int) -> list[logging.LogRecord]:
    """The daemon's log records at ``level`` while it serves one simulated device."""
    device = sim(91, pack_every_s=0.05)
    db = tmp_path / f"{logging.getLevelName(level)}.db"
    register(db, [device])
    lines = Lines()
    logger = logging.getLogger("hirmem.daemon")
    before = logger.level
    logger.addHandler(lines)
    logger.setLevel(level)
    try:
        with running([device]):
            daemon = daemon_for(tmp_path, db, [device], status_every=0.2)
            daemon.start()
            try:
                wait_until(
                    lambda: len(device.accepted) >= 3 and device.status_answers >= 2,
                    30,
                    "packs stored and STATUS answered",
                )
                time.sleep(0.6)  # a traffic summary or two
            finally:
                daemon.stop()
    finally:
        logger.removeHandler(lines)
        logger.setLevel(before)
    return lines.records


def test_debug_logs_say_more_than_info(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service, "TRAFFIC_LOG_EVERY_S", 0.2)
    info = served_log(tmp_path, logging.INFO)
    debug = served_log(tmp_path, logging.DEBUG)
    assert all(r.levelno >= logging.INFO for r in info)
    said_info = {r.getMessage() for r in info}
    said_debug = {r.getMessage() for r in debug}
    assert "session open" in said_info and said_info <= said_debug
    only_debug = {r.getMessage() for r in debug if r.levelno == logging.DEBUG}
    expected = {"line state", "line traffic", "store committed", "status requested"}
    assert expected | {"status report"} <= only_debug, only_debug
    assert not only_debug & said_info
    traffic = [r for r in debug if r.getMessage() == "line traffic"]
    ctx = traffic[-1].ctx  # type: ignore[attr-defined]
    assert ctx["bytes_in"] > 0 and ctx["frames_good"] > 0 and ctx["saves"] >= 1, ctx
    states = [r.ctx["state"] for r in debug if r.getMessage() == "line state"]  # type: ignore[attr-defined]
    assert states[:2] == ["connecting", "open"], states

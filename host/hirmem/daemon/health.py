"""``/healthz``: is the daemon doing its job? The store and every worker, as JSON.

Healthy means: the store's last write went through (a full disk, an I/O error or a
read-only file make it unhealthy until a write succeeds again: the daemon saves
counters every ``save_every`` seconds, so recovery shows within that), and every
configured line's worker thread runs with a session open. A line whose device is
unplugged, whose peer is gone or that is waiting to reconnect makes the daemon
unhealthy: every configured device is meant to be served. The endpoint answers 200
when healthy and 503 otherwise, with the same document either way.

A worker's ``last_seen_s`` is the time since a good frame came from its device, as
seen by the daemon's housekeeping (every ``save_every`` seconds) or at a HELLO.

Nothing here touches the database: a store locked by a long transaction cannot make
the health check hang.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hirmem.daemon.service import Daemon


def _iso_ms(ms: int | None) -> str | None:
    if ms is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def health_report(daemon: Daemon) -> tuple[bool, dict[str, Any]]:
    """(healthy, the document ``/healthz`` serves)."""
    now = time.time()
    write = daemon.store.write_health()
    store = {
        "ok": write.writable,
        "writable": write.writable,
        "last_error": write.last_error,
        "last_error_at": _iso_ms(write.last_error_at),
        "last_write_ok_at": _iso_ms(write.last_ok_at),
        "write_failures": write.failures,
    }
    workers = []
    for worker in daemon.workers:
        heard = worker.last_heard
        ok = worker.alive and worker.phase == "open" and worker.session.is_open
        workers.append({
            "ok": ok,
            "name": worker.config.name,
            "url": worker.config.url,
            "device": worker.device_id.hex() if worker.device_id else None,
            "state": worker.state,
            "phase": worker.phase,
            "alive": worker.alive,
            "session_open": worker.session.is_open,
            "last_seen_s": None if heard is None else round(max(0.0, now - heard), 3),
            "reconnects": worker.reconnects,
            "store_errors": worker.store_errors,
        })  # fmt: skip
    background = {
        job: {"failures": failed} for job, failed in sorted(daemon.background_failures.items())
    }
    healthy = bool(store["ok"]) and all(w["ok"] for w in workers) and not daemon.stopping.is_set()
    doc = {
        "status": "ok" if healthy else "unhealthy",
        "stopping": daemon.stopping.is_set(),
        "store": store,
        "workers": workers,
        "background": background,
    }
    return healthy, doc

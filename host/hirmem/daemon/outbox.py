"""The fleet outbox: every pack the daemon accepted, forwarded to the fleet node.

Store and forward. The queue is the ``outbox`` table of the daemon's store, filled in
the very transaction that stores an accepted pack (:meth:`Store.take_pack`), so a pack
is queued exactly when it is durable, whatever kills the daemon. This job sends the
queue's packs in the order they were stored, each device's in seq order as the fleet's
chain check needs (up to LANES devices at once, one connection each), with
``PUT /v1/packs/{pack_id hex}``, the pack's COSE_Sign1 bytes as the body, signed with
the gateway's Ed25519 key (RFC 9421, :mod:`hirmem.protocol.httpsig`). A pack leaves the
queue (one local transaction per batch) only after the fleet's 201 (stored) or 200
(stored before: a repeat after a lost answer), whose body names the same pack id; a
daemon killed between the fleet's commit and its own is answered 200 on the next
attempt. Nothing is forgotten locally in any case: the outbox forgets, the store keeps
every pack.

Answers and what follows:

- 201 / 200 with this pack's id: acknowledged, removed from the queue;
- 429, 503 (with ``Retry-After``, seconds or an HTTP date, honoured up to an hour), other
  5xx, 408, 401 (the gateway's clock or key registration, never the pack's fault), a
  network error: kept, the whole queue retried after a delay (exponential backoff with
  full jitter, ``backoff_min``·2^n capped at ``backoff_max``), the error recorded;
- any other 4xx (malformed, unknown device, rollback, broken chain, too large …): the
  fleet refused *this pack* for good: recorded in ``fleet_refusals`` with the problem's
  ``reason`` and not sent again, until ``Store.outbox_requeue`` (after the operator
  fixed the cause, e.g. registered the device at the fleet).

Bounded disk: at ``max_packs`` unsent packs or ``max_bytes`` of them the store stops
queueing and intake answers new packs *deferred*: the device keeps them in its own
storage and offers them again, so nothing is dropped and nothing is stored here that
the fleet would never get. ``hirmem status`` and ``/metrics`` say when the bound was
reached, with the queue's depth, its oldest pack's age and the last fleet error.
"""

from __future__ import annotations

import base64
import email.utils
import http.client
import json
import os
import random
import ssl
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import urlsplit

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from hirmem.daemon.config import FleetConfig
from hirmem.daemon.store import OutboxPack, Store
from hirmem.protocol import httpsig
from hirmem.protocol.clock import now_ms
from hirmem.protocol.keys import read_key_file

CONTENT_TYPE = 'application/cose; cose-type="cose-sign1"'
RETRY_AFTER_MAX = 3600.0  # seconds: a Retry-After beyond this is taken as this
ANSWER_MAX = 64 << 10  # bytes of a fleet answer read
BATCH = 64  # packs read from the queue at a time
TICK_BUDGET = 2.0  # seconds one tick sends for at most (the daemon's stop waits for it)
LANES = 4  # devices whose packs are sent at the same time (one connection each)
RETRIED_4XX = frozenset({401, 408, 429})


class Outcome(NamedTuple):
    kind: str  # "acked", "refused" or "retry"
    status: int  # the HTTP status; 0: no answer (network)
    reason: str  # machine-readable: the problem's reason, "stored", "repeat", "network" …
    detail: str
    retry_after: float | None = None


@dataclass(frozen=True, slots=True)
class Figure:
    """One figure for the daemon's metrics (``hirmem_outbox_<name>``)."""

    name: str
    kind: str  # "counter" or "gauge"
    help: str
    value: float
    labels: tuple[tuple[str, str], ...] = ()


def retry_after_seconds(value: str | None, now: float) -> float | None:
    """A Retry-After value (delta seconds or an HTTP date) as seconds from ``now``."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return min(float(text), RETRY_AFTER_MAX)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return min(max(when.timestamp() - now, 0.0), RETRY_AFTER_MAX)


class Outbox:
    """The daemon's background job that empties the outbox into the fleet."""

    name = "outbox"
    interval = 0.2  # seconds between ticks when there is nothing to wait for

    def __init__(
        self,
        store: Store,
        config: FleetConfig,
        *,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.config = config
        gateway = read_key_file(config.key)
        self._key = Ed25519PrivateKey.from_private_bytes(gateway.seed())
        self.keyid = config.keyid or gateway.kid.hex()
        parts = urlsplit(config.url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if self._https else 80)
        self.authority = parts.netloc.lower()
        self._prefix = parts.path.rstrip("/")
        self._clock = clock
        self._rng = rng or random.Random()
        self._local = threading.local()  # each lane's thread keeps its own connection
        self._conns: list[http.client.HTTPConnection] = []
        self._conns_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(LANES, thread_name_prefix="outbox")
        self.failures = 0  # consecutive failed attempts (the backoff's exponent)
        self.next_at = 0.0  # clock time before which nothing is sent
        self.answers: dict[str, int] = {}  # outcome kind and status, e.g. "acked 201"
        store.enable_outbox(config.url, config.max_packs, config.max_bytes)

    # ---- the job ----------------------------------------------------------------------

    def tick(self) -> int:
        """Send what the queue holds (for up to TICK_BUDGET s); packs settled."""
        if self._clock() < self.next_at:
            return 0
        settled = 0
        deadline = time.monotonic() + TICK_BUDGET
        while time.monotonic() < deadline:
            batch = self.store.outbox_batch(BATCH)
            if not batch:
                break
            results = self._send_lanes(batch)
            for _, outcome in results:
                key = f"{outcome.kind} {outcome.status or outcome.reason}"
                self.answers[key] = self.answers.get(key, 0) + 1
            # one local transaction for the batch's acknowledgements: a kill before it
            # commits only means these are sent again, and the fleet answers 200
            self.store.outbox_acked(*[p.pack_id for p, o in results if o.kind == "acked"])
            for pack, outcome in results:
                if outcome.kind == "refused":
                    self.store.outbox_refused(
                        pack.pack_id, outcome.status, outcome.reason, outcome.detail
                    )
            failed = [(p, o) for p, o in results if o.kind == "retry"]
            settled += len(results) - len(failed)
            if failed:
                self._retry_later(*failed[0])
                return settled
            self.failures = 0
        return settled

    def _send_lanes(self, batch: list[OutboxPack]) -> list[tuple[OutboxPack, Outcome]]:
        """Each device's packs in order on a lane of their own, up to LANES devices at
        once; a lane stops at its first pack to retry (the later ones wait for it)."""
        lanes: dict[bytes, list[OutboxPack]] = {}
        for pack in batch:
            lanes.setdefault(pack.device_id, []).append(pack)

        def lane(packs: list[OutboxPack]) -> list[tuple[OutboxPack, Outcome]]:
            done = []
            for pack in packs:
                outcome = self.send(pack)
                done.append((pack, outcome))
                if outcome.kind == "retry":
                    break
            return done

        if len(lanes) == 1:
            return lane(batch)
        return [r for found in self._pool.map(lane, lanes.values()) for r in found]

    def _retry_later(self, pack: OutboxPack, outcome: Outcome) -> None:
        self.failures += 1
        cfg = self.config
        if outcome.retry_after is not None:  # the fleet said when: then, give or take
            delay = outcome.retry_after + self._rng.uniform(0, cfg.backoff_min)
        else:  # full jitter: uniform over [0, min(cap, base·2^n)]
            ceiling = min(cfg.backoff_max, cfg.backoff_min * 2 ** min(self.failures - 1, 40))
            delay = self._rng.uniform(0, ceiling)
        self.next_at = self._clock() + delay
        what = f"HTTP {outcome.status}" if outcome.status else "no answer"
        self.store.outbox_error(
            f"pack {pack.pack_id.hex()}: {what} ({outcome.reason}): {outcome.detail}; "
            f"retry in {delay:.1f} s"
        )

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        with self._conns_lock:
            for conn in self._conns:
                conn.close()
            self._conns.clear()

    # ---- one upload -------------------------------------------------------------------

    def send(self, pack: OutboxPack) -> Outcome:
        path = f"{self._prefix}/v1/packs/{pack.pack_id.hex()}"
        headers = {"Content-Type": CONTENT_TYPE}
        nonce = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        headers.update(httpsig.sign_request(
            "PUT", self.authority, path, headers, pack.raw, self._key, self.keyid,
            int(self._clock()), nonce,
        ))  # fmt: skip
        headers["Host"] = self.authority
        for fresh in (getattr(self._local, "conn", None) is None, True):
            try:
                conn = self._connection()
                conn.request("PUT", path, body=pack.raw, headers=headers)
                answer = conn.getresponse()
                body = answer.read(ANSWER_MAX)
                if not answer.isclosed():  # more than was read: the connection is spent
                    self._drop_connection()
                break
            except (OSError, http.client.HTTPException) as exc:
                self._drop_connection()
                # a kept-alive connection the fleet closed while idle: once more on a new
                # one at once (a PUT of the same pack is idempotent), not a backoff
                stale = isinstance(exc, http.client.RemoteDisconnected | ConnectionResetError |
                                   BrokenPipeError)  # fmt: skip
                if fresh or not stale:
                    return Outcome("retry", 0, "network", f"{type(exc).__name__}: {exc}")
        return self.classify(pack, answer.status, answer.getheader("Retry-After"), body)

    def classify(
        self, pack: OutboxPack, status: int, retry_after: str | None, body: bytes
    ) -> Outcome:
        """What an answer means for the pack (see the module doc)."""
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        fields = parsed if isinstance(parsed, dict) else {}
        if status in (200, 201):
            if fields.get("pack_id") != pack.pack_id.hex():
                return Outcome("retry", status, "bad-answer",
                               f"the answer does not name pack {pack.pack_id.hex()}")  # fmt: skip
            return Outcome("acked", status, "stored" if status == 201 else "repeat", "")
        reason = str(fields.get("reason") or fields.get("title") or f"http-{status}")[:80]
        detail = str(fields.get("detail") or body[:200].decode("utf-8", "replace"))
        if status in (429, 503):
            return Outcome("retry", status, reason, detail,
                           retry_after_seconds(retry_after, self._clock()))  # fmt: skip
        if 400 <= status < 500 and status not in RETRIED_4XX:
            return Outcome("refused", status, reason, detail)
        return Outcome("retry", status, reason, detail)

    def _connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            timeout = self.config.timeout
            if self._https:
                context = ssl.create_default_context(
                    cafile=str(self.config.ca) if self.config.ca else None
                )
                conn = http.client.HTTPSConnection(
                    self._host, self._port, timeout=timeout, context=context
                )
            else:
                conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
            self._local.conn = conn
            with self._conns_lock:
                self._conns.append(conn)
        return conn

    def _drop_connection(self) -> None:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
            with self._conns_lock:
                if conn in self._conns:
                    self._conns.remove(conn)

    # ---- figures ------------------------------------------------------------------------

    def figures(self) -> list[Figure]:
        status = self.store.outbox_status()
        if status is None:
            return []
        now = now_ms()
        oldest = 0.0 if status.oldest_received is None else (now - status.oldest_received) / 1e3
        figures = [
            Figure("depth", "gauge", "Accepted packs the fleet has not acknowledged.",
                   status.depth),
            Figure("bytes", "gauge", "Bytes of the packs the fleet has not acknowledged.",
                   status.size),
            Figure("oldest_age_seconds", "gauge",
                   "Age of the oldest unacknowledged pack (0: none).", max(oldest, 0.0)),
            Figure("full", "gauge",
                   "1 while the outbox bound is reached (intake defers new packs).",
                   float(status.full)),
            Figure("max_packs", "gauge", "The outbox bound in packs.", status.max_packs),
            Figure("max_bytes", "gauge", "The outbox bound in bytes.", status.max_bytes),
            Figure("acked", "counter", "Packs the fleet acknowledged (201 or 200).",
                   status.acked),
            Figure("refused", "counter", "Packs the fleet refused for good (fleet_refusals).",
                   status.refused),
            Figure("errors", "counter", "Upload attempts that failed and are retried.",
                   status.errors),
            Figure("deferred", "counter", "Device packs deferred because the outbox was full.",
                   status.deferred),
            Figure("backoff_seconds", "gauge", "Seconds until the next attempt (0: now).",
                   max(self.next_at - self._clock(), 0.0)),
        ]  # fmt: skip
        if status.last_error_at is not None:
            figures.append(Figure(
                "last_error_timestamp_seconds", "gauge", "When the last fleet error happened.",
                status.last_error_at / 1e3,
            ))  # fmt: skip
            figures.append(Figure(
                "last_error_info", "gauge", "The last fleet error, as a label.", 1.0,
                (("error", (status.last_error or "")[:200]),),
            ))  # fmt: skip
        return figures

"""The daemon's Prometheus exposition: every figure an operator watches, read when scraped.

:class:`DaemonCollector` is a ``prometheus_client`` collector over a running
:class:`~hirmem.daemon.service.Daemon`; :func:`render_metrics` gives the text format
(version 0.0.4) that ``/metrics`` serves. Each scrape reads the live state: nothing
here keeps a second copy of a counter that could drift from the one the daemon saves.

Families (every one with HELP and TYPE; counters end in ``_total``; per-line families
are labelled ``device`` (the id on the line, "" before its first HELLO), ``name`` (the
configured name) and ``url``):

- the session's counters per line (``hirmem_frames_good_total``,
  ``hirmem_packs_accepted_total``, ``hirmem_packs_refused_total{reason}``, …) and the
  worker's own (reconnects, store and worker errors, dropped device logs, line pauses,
  record conflicts);
- what the device reported in its last STATUS (``hirmem_device_*``: its ring, captures,
  evictions, refusals, edge quarantine);
- the line's state (``hirmem_line_state{state}``: 1 for the current one) and
  ``hirmem_session_open``, ``hirmem_worker_alive`` and
  ``hirmem_device_last_heard_timestamp_seconds``;
- the intake latency, from a complete pack received to its transaction committed
  (``hirmem_intake_seconds{outcome}``, a histogram);
- the store (``hirmem_store_*``: packs, records, record conflicts, refusal digests
  kept, refused offers, digests rotated out, integrity warnings, writes that failed,
  its size), read on a snapshot connection of its own;
- background jobs (``hirmem_background_failures_total{job}``) and whatever figures a job
  offers (the memory keeper: ``hirmem_memory_*``);
- the endpoint itself (``hirmem_http_*``: open connections, requests, connections closed).

Label values are bounded: one series set per configured line (not per device id ever
seen on it) and label values from fixed sets.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Protocol

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from hirmem.daemon.store import StoreFigures
from hirmem.link.session import Counters
from hirmem.protocol.messages import Status

if TYPE_CHECKING:
    from hirmem.daemon.service import Daemon, DeviceWorker

# The intake's latency buckets, seconds: a commit with synchronous=FULL takes about a
# millisecond on a quiet SSD; the upper buckets show a busy or failing disk.
INTAKE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                  2.5, 5.0, 10.0)  # fmt: skip
INTAKE_OUTCOMES = ("accepted", "duplicate", "refused", "deferred")

# The phases a worker's line goes through (DeviceWorker.phase).
LINE_PHASES = ("starting", "connecting", "open", "lost", "reconnecting", "stopped")

# HELP for every session counter (hirmem.link.session.Counters); a test checks that
# none is missing. The label of a counter kept by kind is given beside it.
SESSION_HELP: dict[str, tuple[str, str]] = {
    "bytes_in": ("Bytes read from the line.", ""),
    "bytes_out": ("Bytes written to the line.", ""),
    "frames_good": ("Frames read with a good CRC and CBOR body.", ""),
    "frames_empty": ("Empty frames (a lone delimiter) read.", ""),
    "frames_bad": ("Damaged frames read, by what was wrong.", "kind"),
    "frames_out": ("Frames written.", ""),
    "messages_in": ("Well-formed messages read, by type.", "type"),
    "messages_out": ("Messages sent (first transmissions), by type.", "type"),
    "refused_in": ("Messages from the device answered with ERROR, by code.", "code"),
    "errors_in": ("ERROR messages the device sent, by code.", "code"),
    "delivered": ("Sequenced messages delivered in order.", ""),
    "duplicates": ("Sequenced messages received again (already delivered).", ""),
    "out_of_order": ("Sequenced messages received ahead of a gap.", ""),
    "retransmissions": ("Messages the host sent again after a timeout.", ""),
    "timeouts": ("Acknowledgement timeouts on the host's messages.", ""),
    "acks_out": ("Acknowledgements sent.", ""),
    "hellos": ("HELLO messages received.", ""),
    "hello_retransmits": ("Repeated HELLOs answered with the stored HELLO_ACK.", ""),
    "sessions_opened": ("Sessions opened.", ""),
    "proofs_verified": ("Session PROOFs verified with the device's registered key.", ""),
    "proofs_unchecked": ("Session PROOFs of a device id with no registered key.", ""),
    "proofs_refused": ("Session PROOFs refused (no session opened), by reason.", "reason"),
    "sessions_lost": ("Sessions lost (line drops, timeouts, new HELLOs).", ""),
    "device_resets": ("Device resets seen (a HELLO with a new boot counter).", ""),
    "no_session": ("Sequenced messages answered ERROR no-session.", ""),
    "fragments_in": ("Frame pieces received (SPEC §6.8).", ""),
    "fragments_out": ("Frame pieces sent (SPEC §6.8).", ""),
    "reassembled": ("Messages joined from frame pieces.", ""),
    "pieces_refused": ("Frame pieces refused (SPEC §6.8), by kind.", "kind"),
    "captures_sent": ("CAPTURE requests sent to the device.", ""),
    "capture_results": ("CAPTURE results received.", ""),
    "own_captures": ("Captures the device reported on its own.", ""),
    "status_reports": ("STATUS reports received.", ""),
    "packs_offered": ("Memory packs the device offered.", ""),
    "packs_accepted": ("Memory packs accepted into the store.", ""),
    "packs_duplicate": ("Memory packs offered again and already stored.", ""),
    "packs_deferred": ("Memory packs deferred (the store could not take them).", ""),
    "packs_refused": ("Memory packs refused, by reason.", "reason"),
    "knowledge_pushed": ("Knowledge packs pushed to the device.", ""),
    "knowledge_accepted": ("Knowledge packs the device accepted.", ""),
    "knowledge_refused": ("Knowledge packs the device refused or deferred, by reason.", "reason"),
    "requests_failed": ("Host requests that failed (no answer, refused).", ""),
    "intake_failures": ("Intake calls that raised (answered deferred).", ""),
}

# The worker's own counters (DeviceWorker.counters()).
WORKER_HELP: dict[str, str] = {
    "reconnects": "Times the line was reopened after it dropped or could not be opened.",
    "store_errors": "Store writes of this line's worker that failed (logged, retried).",
    "worker_errors": "Unexpected errors in this line's worker (logged; it goes on).",
    "device_logs_dropped": "Device LOG lines dropped by the rate limit.",
    "line_pauses": "Times reading the line was paused because it flooded the host.",
    "record_conflicts": "Records whose id a different record held, kept apart.",
}

# STATUS fields (SPEC §5.10): levels are gauges, the device's running counts counters
# (they restart with the device, which rate() understands).
DEVICE_GAUGES: dict[str, str] = {
    "uptime_ms": "Device uptime in milliseconds, as last reported.",
    "ring_used": "Working-memory ring slots in use on the device.",
    "ring_capacity": "Working-memory ring slots on the device.",
    "knowledge_seq": "Knowledge version the device holds.",
}
DEVICE_COUNTERS: dict[str, str] = {
    "captures": "Captures taken on the device (since its boot).",
    "evictions": "Ring entries the device evicted before they were judged.",
    "refusals": "Captures the device refused (ring full).",
    "quarantined": "Records the device's gate quarantined at the edge.",
    "candidates": "Episodic candidates the device's gate passed.",
    "packs_sent": "Packs the device sent.",
    "packs_acked": "Packs the host acknowledged to the device.",
    "frames_good": "Good frames the device read.",
    "frames_bad": "Damaged frames the device read.",
    "retransmits": "Messages the device sent again.",
}


class JobFigure(Protocol):
    """One figure a background job offers (the memory keeper's ``figures()``)."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...  # "counter" or "gauge"
    @property
    def help(self) -> str: ...
    @property
    def value(self) -> float: ...
    @property
    def labels(self) -> Sequence[tuple[str, str]]: ...


class LatencyHistogram:
    """Observations in fixed buckets (cumulative at exposition), safe from any thread."""

    def __init__(self, buckets: Sequence[float] = INTAKE_BUCKETS) -> None:
        self.bounds = tuple(buckets)
        self._counts = [0] * (len(self.bounds) + 1)  # the last one: above every bound
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        slot = bisect.bisect_left(self.bounds, seconds)
        with self._lock:
            self._counts[slot] += 1
            self._sum += seconds

    def snapshot(self) -> tuple[list[tuple[str, float]], float]:
        """Cumulative (le, count) pairs ending at +Inf, and the sum."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        out, running = [], 0
        for bound, n in zip((*map(str, self.bounds), "+Inf"), counts, strict=True):
            running += n
            out.append((bound, float(running)))
        return out, total


class IntakeLatency:
    """One :class:`LatencyHistogram` per outcome of an offer."""

    def __init__(self) -> None:
        self.by_outcome = {o: LatencyHistogram() for o in INTAKE_OUTCOMES}

    def observe(self, outcome: str, seconds: float) -> None:
        self.by_outcome[outcome].observe(seconds)


LINE_LABELS = ["device", "name", "url"]


def _line_labels(worker: DeviceWorker) -> list[str]:
    shown = worker.line_device
    device = shown.hex() if shown else ""
    return [device, worker.config.name, worker.config.url]


# The store's figures are read at most this often: scrapers hammering /metrics cost the
# database one short read transaction per second, whatever their number.
FIGURES_MAX_AGE_S = 1.0


class DaemonCollector(Collector):
    """Collects the families listed in the module's docstring from one daemon."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self._figures: tuple[float, StoreFigures] | None = None  # (when read, figures)

    def _store_figures(self) -> StoreFigures:
        now = time.monotonic()
        if self._figures is None or now - self._figures[0] >= FIGURES_MAX_AGE_S:
            self._figures = (now, self.daemon.store.figures())
        return self._figures[1]

    def collect(self) -> Iterator[Metric]:
        yield from self._session_families()
        yield from self._worker_families()
        yield from self._device_families()
        yield from self._line_families()
        yield self._intake_family()
        yield from self._store_families()
        yield from self._background_families()
        yield from self._endpoint_families()

    # ---- per line --------------------------------------------------------------------

    def _session_families(self) -> Iterator[Metric]:
        snapshots = [(w, w.session.counters.snapshot()) for w in self.daemon.workers]
        for f in fields(Counters):
            help_text, key = SESSION_HELP.get(f.name, (f"Session counter {f.name}.", "kind"))
            family = CounterMetricFamily(
                f"hirmem_{f.name}", help_text, labels=LINE_LABELS + ([key] if key else [])
            )
            for worker, counters in snapshots:
                value = getattr(counters, f.name)
                labels = _line_labels(worker)
                if isinstance(value, dict):
                    for kind, n in sorted(value.items()):
                        family.add_metric([*labels, str(kind)], int(n))
                else:
                    family.add_metric(labels, int(value))
            yield family

    def _worker_families(self) -> Iterator[Metric]:
        counted = [(w, w.counters()) for w in self.daemon.workers]
        for name, help_text in WORKER_HELP.items():
            family = CounterMetricFamily(f"hirmem_{name}", help_text, labels=LINE_LABELS)
            for worker, counters in counted:
                family.add_metric(_line_labels(worker), counters[name])
            yield family

    def _device_families(self) -> Iterator[Metric]:
        status_fields = [f.name for f in fields(Status)]
        for name in status_fields:
            metric = f"hirmem_device_{name}"
            family: GaugeMetricFamily | CounterMetricFamily
            if name in DEVICE_GAUGES:
                family = GaugeMetricFamily(metric, DEVICE_GAUGES[name], labels=LINE_LABELS)
            else:
                help_text = DEVICE_COUNTERS.get(name, f"Device STATUS field {name}.")
                family = CounterMetricFamily(metric, help_text, labels=LINE_LABELS)
            for worker in self.daemon.workers:
                if name in worker.device_status:  # nothing until its first STATUS
                    family.add_metric(_line_labels(worker), worker.device_status[name])
            yield family

    def _line_families(self) -> Iterator[Metric]:
        state = GaugeMetricFamily(
            "hirmem_line_state",
            "The line's current phase: 1 for the phase it is in, 0 for the others.",
            labels=[*LINE_LABELS, "state"],
        )
        session_open = GaugeMetricFamily(
            "hirmem_session_open", "1 while a session with the device is open.", labels=LINE_LABELS
        )
        alive = GaugeMetricFamily(
            "hirmem_worker_alive", "1 while the line's worker thread runs.", labels=LINE_LABELS
        )
        heard = GaugeMetricFamily(
            "hirmem_device_last_heard_timestamp_seconds",
            "When a good frame last came from the device (Unix time; absent: never).",
            labels=LINE_LABELS,
        )
        for worker in self.daemon.workers:
            labels = _line_labels(worker)
            for phase in LINE_PHASES:
                state.add_metric([*labels, phase], float(worker.phase == phase))
            session_open.add_metric(labels, float(worker.session.is_open))
            alive.add_metric(labels, float(worker.alive))
            if worker.last_heard is not None:
                heard.add_metric(labels, worker.last_heard)
        yield from (state, session_open, alive, heard)

    def _intake_family(self) -> Metric:
        family = HistogramMetricFamily(
            "hirmem_intake_seconds",
            "Time from a complete pack received to its transaction committed (or refused, "
            "or deferred because the store failed), by outcome.",
            labels=[*LINE_LABELS, "outcome"],
        )
        for worker in self.daemon.workers:
            labels = _line_labels(worker)
            for outcome, histogram in worker.intake.latency.by_outcome.items():
                buckets, total = histogram.snapshot()
                family.add_metric([*labels, outcome], buckets, total)
        return family

    # ---- the store -------------------------------------------------------------------

    def _names(self) -> dict[bytes, str]:
        """Each device's configured name: its current line's, else the last saved."""
        try:
            names = self.daemon.store.session_names()
        except Exception:  # a store that cannot be read still leaves the line's names
            names = {}
        for worker in self.daemon.workers:
            if worker.line_device is not None:
                names[worker.line_device] = worker.config.name
        return names

    def _store_families(self) -> Iterator[Metric]:
        store = self.daemon.store
        health = store.write_health()
        writable = GaugeMetricFamily(
            "hirmem_store_writable", "1 when the store's last write went through, else 0."
        )
        writable.add_metric([], float(health.writable))
        failures = CounterMetricFamily(
            "hirmem_store_write_failures",
            "Store transactions that failed (disk full, I/O error, read-only file).",
        )
        failures.add_metric([], health.failures)
        yield from (writable, failures)
        try:
            figures = self._store_figures()
        except Exception:  # the figures cannot be read: say so, keep the rest of the page
            readable = GaugeMetricFamily(
                "hirmem_store_readable", "1 when the store's figures could be read."
            )
            readable.add_metric([], 0.0)
            yield readable
            return
        readable = GaugeMetricFamily(
            "hirmem_store_readable", "1 when the store's figures could be read."
        )
        readable.add_metric([], 1.0)
        yield readable
        names = self._names()
        labels = ["device", "name"]

        def per_device(family: GaugeMetricFamily | CounterMetricFamily,
                       counts: dict[bytes, int]) -> GaugeMetricFamily | CounterMetricFamily:
            for device, n in sorted(counts.items()):
                family.add_metric([device.hex(), names.get(device, "")], n)
            return family

        yield per_device(
            GaugeMetricFamily("hirmem_store_packs", "Accepted packs in the store.", labels=labels),
            figures.packs,
        )
        yield per_device(
            GaugeMetricFamily(
                "hirmem_store_records", "Records of accepted packs in the store.", labels=labels
            ),
            figures.records,
        )
        yield per_device(
            GaugeMetricFamily(
                "hirmem_store_record_conflicts",
                "Records kept in record_conflicts (an id reused with other contents).",
                labels=labels,
            ),
            figures.record_conflicts,
        )
        refusals = GaugeMetricFamily(
            "hirmem_store_refusals",
            "Refused-pack digests kept in the store, by the line's device and reason.",
            labels=[*labels, "reason"],
        )
        for (device, reason), n in sorted(figures.refusals.items()):
            refusals.add_metric(
                [device.hex(), names.get(device, ""), reason.name.lower().replace("_", "-")], n
            )
        yield refusals
        yield per_device(
            CounterMetricFamily(
                "hirmem_store_refused_offers",
                "Pack offers refused and recorded (kept digests and rotated ones).",
                labels=labels,
            ),
            figures.refused_offers,
        )
        yield per_device(
            CounterMetricFamily(
                "hirmem_store_refusals_rotated",
                "Refused-pack digests rotated out of the store at its quota.",
                labels=labels,
            ),
            figures.refusals_rotated,
        )
        for name, help_text, value in (
            ("hirmem_store_integrity_warnings",
             "Integrity warnings (devices with record conflicts; hirmem intake --check).",
             figures.integrity_warnings),
            ("hirmem_store_devices", "Registered devices.", figures.devices),
            ("hirmem_store_size_bytes", "Bytes the store's pages in use take.",
             figures.size_bytes),
        ):  # fmt: skip
            gauge = GaugeMetricFamily(name, help_text)
            gauge.add_metric([], value)
            yield gauge

    # ---- background jobs -------------------------------------------------------------

    def _background_families(self) -> Iterator[Metric]:
        failures = CounterMetricFamily(
            "hirmem_background_failures",
            "Background job ticks that failed (logged; the next tick retries).",
            labels=["job"],
        )
        for name, failed in sorted(self.daemon.background_failures.items()):
            failures.add_metric([name], failed)
        yield failures
        for job in self.daemon.background:
            offered = getattr(job, "figures", None)
            if not callable(offered):
                continue
            try:
                figures: list[JobFigure] = list(offered())
            except Exception:  # a job's figures must not take the page down
                continue
            yield from _job_families(job.name, figures)


    def _endpoint_families(self) -> Iterator[Metric]:
        endpoint = self.daemon.endpoint
        if endpoint is None:
            return
        c = endpoint.counters
        connections = GaugeMetricFamily(
            "hirmem_http_connections", "Connections open to this endpoint."
        )
        connections.add_metric([], endpoint.open_connections)
        requests = CounterMetricFamily("hirmem_http_requests", "Requests answered.")
        requests.add_metric([], c.requests)
        closed = CounterMetricFamily(
            "hirmem_http_connections_closed",
            "Connections the endpoint closed or refused, by why (evicted: idle the longest "
            "when the limit was reached).",
            labels=["why"],
        )
        for why, n in c.closed.items():
            closed.add_metric([why], n)
        yield from (connections, requests, closed)


def _job_families(job: str, figures: Sequence[JobFigure]) -> Iterator[Metric]:
    families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
    for fig in figures:
        name = f"hirmem_{job}_{fig.name}"
        family = families.get(name)
        if family is None:
            keys = [k for k, _ in fig.labels]
            if fig.kind == "counter":
                family = CounterMetricFamily(name, fig.help, labels=keys)
            else:
                family = GaugeMetricFamily(name, fig.help, labels=keys)
            families[name] = family
        family.add_metric([v for _, v in fig.labels], fig.value)
    yield from families.values()


def daemon_registry(daemon: Daemon) -> CollectorRegistry:
    """A registry of the daemon's own (not the process-wide default one)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DaemonCollector(daemon))
    return registry


def render_metrics(daemon: Daemon) -> str:
    """The daemon's figures in the Prometheus text format (what ``/metrics`` serves)."""
    return generate_latest(daemon.registry).decode()

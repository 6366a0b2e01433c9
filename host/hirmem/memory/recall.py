"""Recall: ``Recall_i(q) = Sim(q, i) · M_i · Rec_i · Trust_i``, top-k, filtered first.

* ``Sim`` — cosine similarity of unit vectors, taken as ``max(0, cos)``: a memory with
  nothing in common with the query does not surface.
* ``M`` — strength decayed to the instant of the query (the index keeps each row's
  settled strength, last access and decayed-at, and the engine gives it the decay law:
  :func:`hirmem.memory.dynamics.decayed_now`), not the strength of the last sweep;
  ``Rec = e^(-(now - last_access)/τ)``; ``Trust = H·I·R`` at admission.
* Filters (layer, state, source, device, subject) select the rows that may rank; by
  default only candidate and consolidated memories may. A memory whose score is 0 —
  in particular every memory with Trust = 0 (MEM-INV-6) — never surfaces, and neither
  does a quarantined one, whatever the filter asks (one guard across the system:
  issue 13); only an explicit id lookup (:meth:`MemoryEngine.get`) returns them.

Speed: the index keeps the embeddings in one contiguous float32 matrix and the factors
as columns. Because ``Rec`` factors as ``e^((last_access - t0)/τ) · e^((t0 - now)/τ)``
and the second factor is the same for every memory of one query, the per-memory part
``M · Trust · e^((last_access - t0)/τ)`` is kept folded into one weight vector (updated
incrementally on every change). A query is then one matrix-vector product, one
elementwise product with the weights (times the filter mask) and one argpartition;
exact scores are recomputed in float64 for the k winners only (see :meth:`RecallIndex.scale`
for how rows that may not rank are kept out without a second pass). ``t0`` is rebased
before the exponent could overflow float32.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from hirmem.memory.model import Layer, Memory, State

__all__ = ["DEFAULT_STATES", "RecallFilter", "RecallHit", "RecallIndex"]

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
DEFAULT_STATES = frozenset({State.CANDIDATE, State.CONSOLIDATED})
_REBASE = 40.0  # rebase t0 once (now - t0)/τ passes this (e^40 ≪ float32 max e^88)
_UNRANKED = np.float32(1e-30)


@dataclass(frozen=True)
class RecallFilter:
    """Metadata filters; an empty set means "any" (states default to the recallable ones)."""

    layers: frozenset[Layer] = frozenset()
    states: frozenset[State] = DEFAULT_STATES
    sources: frozenset[str] = frozenset()
    devices: frozenset[str] = frozenset()
    subjects: frozenset[str] = frozenset()

    def is_default(self) -> bool:
        return (
            not (self.layers or self.sources or self.devices or self.subjects)
            and self.states == DEFAULT_STATES
        )

    def sql(self) -> tuple[str, list[object]]:
        """The same filter as a WHERE clause over ``memories`` and its parameters
        ("1" when it lets everything through): for listing in SQL."""
        terms: list[str] = []
        params: list[object] = []
        for column, wanted in (
            ("layer", sorted(int(x) for x in self.layers)),
            ("state", sorted(int(x) for x in self.states)),
            ("source", sorted(self.sources)),
            ("device", sorted(self.devices)),
            ("subject", sorted(self.subjects)),
        ):
            if wanted:
                terms.append(f"{column} IN ({', '.join('?' * len(wanted))})")
                params.extend(wanted)
        return " AND ".join(terms) or "1", params

    def matches(self, m: Memory) -> bool:
        return (
            (not self.layers or m.layer in self.layers)
            and (not self.states or m.state in self.states)
            and (not self.sources or m.source in self.sources)
            and (not self.devices or m.device in self.devices)
            and (not self.subjects or m.subject in self.subjects)
        )


@dataclass(frozen=True)
class RecallHit:
    id: str
    rowid: int
    score: float
    sim: float
    strength: float
    recency: float
    trust: float


class _Codes:
    """Interns strings to small ints for filter columns."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}

    def code(self, value: str) -> int:
        return self.codes.setdefault(value, len(self.codes))

    def lookup(self, values: Iterable[str]) -> list[int]:
        return [self.codes[v] for v in values if v in self.codes]


class RecallIndex:
    """Columns of every gated memory, in memory, for ranking."""

    _COLUMNS: tuple[tuple[str, str], ...] = (
        ("rowid", "i8"), ("strength", "f8"), ("last_access", "f8"), ("decayed_at", "f8"),
        ("trust", "f8"),
        ("weight", "f4"), ("state", "i1"), ("layer", "i1"),
        ("source", "i4"), ("device", "i4"), ("subject", "i4"),
    )  # fmt: skip

    def __init__(self, dim: int, recency_tau: float, t0: float = 0.0) -> None:
        self.dim = dim
        self.recency_tau = recency_tau
        self.t0 = t0
        self.n = 0
        self.cap = 0
        # rows per block for batched queries: few products (each one a multi-threaded
        # BLAS call that waits for every core) and 16 MiB of keys for 64 queries
        self.block = 65536
        self.emb: F32 = np.zeros((0, dim), np.float32)
        self.ids: npt.NDArray[np.uint8] = np.zeros((0, 16), np.uint8)
        self.rowid: npt.NDArray[np.int64] = np.zeros(0, np.int64)
        self.strength: npt.NDArray[np.float64] = np.zeros(0)
        self.last_access: npt.NDArray[np.float64] = np.zeros(0)
        self.decayed_at: npt.NDArray[np.float64] = np.zeros(0)
        # (now, strength, last_access, decayed_at, layer) → strength at now; None: no decay
        self.decay: Callable[[float, F64, F64, F64, npt.NDArray[np.int8]], F64] | None = None
        self._at: tuple[int, float, F64, F32] | None = None  # (version, now, M now, weight)
        self.trust: npt.NDArray[np.float64] = np.zeros(0)
        self.weight: F32 = np.zeros(0, np.float32)
        self._version = 0  # bumped when any weight changes
        self._struct = 0  # bumped when a filter column (state, layer, codes) changes
        self._default: tuple[int, F32, npt.NDArray[np.bool_]] | None = None
        self._masks: dict[RecallFilter, tuple[int, npt.NDArray[np.bool_]]] = {}
        self.state: npt.NDArray[np.int8] = np.zeros(0, np.int8)
        self.layer: npt.NDArray[np.int8] = np.zeros(0, np.int8)
        self.source: npt.NDArray[np.int32] = np.zeros(0, np.int32)
        self.device: npt.NDArray[np.int32] = np.zeros(0, np.int32)
        self.subject: npt.NDArray[np.int32] = np.zeros(0, np.int32)
        self.pos_of_rowid: npt.NDArray[np.int64] = np.full(1024, -1, dtype=np.int64)
        self._sources = _Codes()
        self._devices = _Codes()
        self._subjects = _Codes()
        self._alloc(1024)

    def _alloc(self, cap: int) -> None:
        """(Re)allocate every column for ``cap`` rows, keeping the first ``n``."""
        n = self.n
        emb = np.zeros((cap, self.dim), dtype=np.float32)
        emb[:n] = self.emb[:n]
        self.emb = emb
        ids = np.zeros((cap, 16), dtype=np.uint8)
        ids[:n] = self.ids[:n]
        self.ids = ids
        for name, dtype in self._COLUMNS:
            col = np.zeros(cap, dtype=dtype)
            col[:n] = getattr(self, name)[:n]
            setattr(self, name, col)
        self.cap = cap

    def _grow_rowids(self, top: int) -> None:
        if top > len(self.pos_of_rowid):
            bigger = np.full(max(top, 2 * len(self.pos_of_rowid)), -1, np.int64)
            bigger[: len(self.pos_of_rowid)] = self.pos_of_rowid
            self.pos_of_rowid = bigger

    # -- maintenance --------------------------------------------------------------------
    def _pos(self, rowid: int) -> int:
        if rowid < len(self.pos_of_rowid):
            return int(self.pos_of_rowid[rowid])
        return -1

    def upsert(self, rowid: int, m: Memory) -> None:
        """Add a gated memory or refresh its columns (volatile ones are not indexed)."""
        if m.state is State.VOLATILE:
            return
        pos = self._pos(rowid)
        if pos < 0:
            if self.n == self.cap:
                self._alloc(self.cap * 2)
            self._grow_rowids(rowid + 1)
            pos = self.n
            self.n += 1
            self.pos_of_rowid[rowid] = pos
            self.rowid[pos] = rowid
            self.ids[pos] = np.frombuffer(bytes.fromhex(m.id), np.uint8)
            self.emb[pos] = np.frombuffer(m.embedding, dtype=np.float32)
            self._struct += 1
        codes = (
            int(m.state), int(m.layer), self._sources.code(m.source),
            self._devices.code(m.device), self._subjects.code(m.subject),
        )  # fmt: skip
        cols: tuple[npt.NDArray[np.integer[Any]], ...] = (
            self.state, self.layer, self.source, self.device, self.subject,
        )  # fmt: skip
        if any(int(col[pos]) != code for col, code in zip(cols, codes, strict=True)):
            self._struct += 1
        self.strength[pos] = m.strength
        self.last_access[pos] = m.last_access
        self.decayed_at[pos] = m.decayed_at
        self.trust[pos] = m.trust
        for col, code in zip(cols, codes, strict=True):
            col[pos] = code
        self._refresh(slice(pos, pos + 1))

    def load_columns(
        self,
        rowids: npt.NDArray[np.int64],
        ids: list[bytes],
        emb: F32,
        strength: npt.NDArray[np.float64],
        last_access: npt.NDArray[np.float64],
        trust: npt.NDArray[np.float64],
        state: npt.NDArray[np.int8],
        layer: npt.NDArray[np.int8],
        sources: list[str],
        devices: list[str],
        subjects: list[str],
        decayed_at: npt.NDArray[np.float64] | None = None,
    ) -> None:
        """Bulk append (start-up load, benchmarks): columns in rowid order (``decayed_at``
        defaults to ``last_access``: nothing decayed yet)."""
        count = len(rowids)
        if count == 0:
            return
        need = self.n + count
        if need > self.cap:
            self._alloc(max(need, 2 * self.cap))
        self._grow_rowids(int(rowids.max()) + 1)
        sl = slice(self.n, need)
        self.pos_of_rowid[rowids] = np.arange(self.n, need)
        self.rowid[sl] = rowids
        self.ids[sl] = np.frombuffer(b"".join(ids), np.uint8).reshape(-1, 16)
        self.emb[sl] = emb
        self.strength[sl] = strength
        self.last_access[sl] = last_access
        self.decayed_at[sl] = last_access if decayed_at is None else decayed_at
        self.trust[sl] = trust
        self.state[sl] = state
        self.layer[sl] = layer
        self.source[sl] = [self._sources.code(s) for s in sources]
        self.device[sl] = [self._devices.code(s) for s in devices]
        self.subject[sl] = [self._subjects.code(s) for s in subjects]
        self.n = need
        self._struct += 1
        self._refresh(sl)

    def update_columns(
        self,
        rowids: npt.NDArray[np.int64],
        strength: npt.NDArray[np.float64],
        state: npt.NDArray[np.int8],
        layer: npt.NDArray[np.int8],
        decayed_at: npt.NDArray[np.float64] | None = None,
    ) -> None:
        """Bulk update after a sweep."""
        if len(rowids) == 0:
            return
        pos = self.pos_of_rowid[rowids]
        keep = pos >= 0
        pos = pos[keep]
        self.strength[pos] = strength[keep]
        if decayed_at is not None:
            self.decayed_at[pos] = decayed_at[keep]
        self.state[pos] = state[keep]
        self.layer[pos] = layer[keep]
        self._struct += 1
        self._refresh(pos)

    def set_strengths(
        self, rowids: Sequence[int], strength: Sequence[float], last_access: Sequence[float],
        decayed_at: Sequence[float], trust: Sequence[float],
    ) -> list[int]:  # fmt: skip
        """Rows whose strength, last access, settled decay and trust moved, nothing else
        (patterns' steps: no filter column changes); returns the rowids it does not
        hold (the caller upserts those whole)."""
        ids = np.asarray(rowids, dtype=np.int64)
        inside = ids < len(self.pos_of_rowid)
        pos = np.full(len(ids), -1, np.int64)
        pos[inside] = self.pos_of_rowid[ids[inside]]
        keep = pos >= 0
        if keep.any():
            at = pos[keep]
            self.strength[at] = np.asarray(strength, dtype=np.float64)[keep]
            self.last_access[at] = np.asarray(last_access, dtype=np.float64)[keep]
            self.decayed_at[at] = np.asarray(decayed_at, dtype=np.float64)[keep]
            self.trust[at] = np.asarray(trust, dtype=np.float64)[keep]
            self._refresh(at)
        return [int(r) for r in ids[~keep]]

    def _refresh(self, sel: slice | npt.NDArray[np.int64]) -> None:
        rec = np.exp((self.last_access[sel] - self.t0) / self.recency_tau)
        self.weight[sel] = (self.strength[sel] * self.trust[sel] * rec).astype(np.float32)
        self._version += 1

    def rebase(self, now: float) -> None:
        self.t0 = now
        self._refresh(slice(0, self.n))

    # -- queries ------------------------------------------------------------------------
    def mask(self, flt: RecallFilter) -> npt.NDArray[np.bool_]:
        """Rows the filter admits, cached per filter until a filter column changes."""
        hit = self._masks.get(flt)
        if hit is not None and hit[0] == self._struct:
            return hit[1]
        ok = self._compute_mask(flt)
        if len(self._masks) >= 16:
            self._masks.clear()
        self._masks[flt] = (self._struct, ok)
        return ok

    def _compute_mask(self, flt: RecallFilter) -> npt.NDArray[np.bool_]:
        """Lookup tables over the code columns (no sorting, one gather per column)."""
        n = self.n
        ok: npt.NDArray[np.bool_] = self.state[:n] != int(State.QUARANTINED)  # id only

        def allow(col: npt.NDArray[np.generic], codes: list[int], size: int) -> None:
            table = np.zeros(max(size, 1), dtype=bool)
            table[codes] = True
            ok[:] &= table[col[:n]]

        if flt.states:
            allow(self.state, [int(x) for x in flt.states], len(State))
        if flt.layers:
            allow(self.layer, [int(x) for x in flt.layers], len(Layer))
        for values, codes, col in (
            (flt.sources, self._sources, self.source),
            (flt.devices, self._devices, self.device),
            (flt.subjects, self._subjects, self.subject),
        ):
            if values:
                allow(col, codes.lookup(values), len(codes.codes))
        return ok

    def at(self, now: float) -> tuple[F64, F32]:
        """Strength decayed to ``now`` and the folded weights built on it (cached for one
        instant and one version of the columns)."""
        n = self.n
        if self.decay is None:
            return self.strength[:n], self.weight[:n]
        if self._at is not None and self._at[0] == self._version and self._at[1] == now:
            return self._at[2], self._at[3]
        # only live memories decay (the sweep's rule); archived and quarantined ones keep
        # the strength they were left with
        state = self.state[:n]
        live = (state == int(State.CANDIDATE)) | (state == int(State.CONSOLIDATED))
        decayed = self.decay(now, self.strength[:n], self.last_access[:n], self.decayed_at[:n],
                             self.layer[:n])  # fmt: skip
        m_now = np.where(live, decayed, self.strength[:n])
        rec = np.exp((self.last_access[:n] - self.t0) / self.recency_tau)
        w = (m_now * self.trust[:n] * rec).astype(np.float32)
        self._at = (self._version, now, m_now, w)
        return m_now, w

    def scale(
        self, flt: RecallFilter, now: float | None = None
    ) -> tuple[F32, npt.NDArray[np.bool_]]:
        """Per-row multiplier that turns a similarity into the ranking key, and the rows
        that may rank.

        A ranked row (admitted by the filter, weight > 0) has its folded weight as
        multiplier, so its key is its score up to the query's constant. Every other row
        gets :data:`_UNRANKED` (1e-30): its key is ``sim · 1e-30``, within ±1e-30 and still
        distinct from its neighbours (a wall of equal keys would slow argpartition down
        several times, and an extra bias pass would cost a full sweep of the scores).
        :meth:`search` checks every winner against ``ranked`` and falls back to an exact
        selection in the rare case that one is not a ranked row with a positive key.
        """
        dynamic = self.decay is not None and now is not None
        if (
            flt.is_default()
            and not dynamic
            and self._default is not None
            and self._default[0] == self._version
        ):
            return self._default[1], self._default[2]
        w = self.at(now)[1] if dynamic and now is not None else self.weight[: self.n]
        ranked = self.mask(flt) & (w > 0)
        scale = np.where(ranked, w, _UNRANKED).astype(np.float32)
        if flt.is_default() and not dynamic:
            self._default = (self._version, scale, ranked)
        return scale, ranked

    def search(self, queries: F32, k: int, flt: RecallFilter, now: float) -> list[list[RecallHit]]:
        """Top-k per query row of ``queries`` (shape ``(m, dim)`` or ``(dim,)``)."""
        if (now - self.t0) / self.recency_tau > _REBASE:
            self.rebase(now)
        q = np.ascontiguousarray(queries, dtype=np.float32)
        q2 = q[None, :] if q.ndim == 1 else q
        n = self.n
        if n == 0 or k <= 0:
            return [[] for _ in range(len(q2))]
        scale, ranked = self.scale(flt, now)
        kk = min(k, n)
        if len(q2) == 1 or n <= self.block:
            keys = (self.emb[:n] @ q2[0])[None, :] if len(q2) == 1 else q2 @ self.emb[:n].T
            np.multiply(keys, scale, out=keys)
            top = np.argpartition(keys, n - kk, axis=1)[:, n - kk :]
            top_keys = np.take_along_axis(keys, top, 1)
        else:
            top, top_keys = self._blocked(q2, scale, kk)
        out = []
        for j in range(len(q2)):
            sel = top[j]
            if not (ranked[sel].all() and (top_keys[j] > 0).all()):
                full = (self.emb[:n] @ q2[j]) * scale
                sel = self._exact(full, ranked, kk)
            out.append(self._hits(q2[j], sel, now))
        return out

    def _blocked(self, q2: F32, scale: F32, kk: int) -> tuple[npt.NDArray[np.intp], F32]:
        """Top-kk keys per query, computed block by block of rows: the matrix is read
        once and the key buffer is one (queries, block) array at a time.

        The first block is partitioned; after it each query keeps its kk best so far and
        their least key as a bar, and a later block is only compared with the bar: the
        few keys above it (on random data about kk · block / rows seen) are merged into
        the best with one small partition, all queries at once. So most blocks cost one
        product and one comparison, not a partition of every key."""
        m, block = len(q2), self.block
        best_idx: npt.NDArray[np.intp] = np.empty((m, 0), dtype=np.intp)
        best_key: F32 = np.empty((m, 0), dtype=np.float32)
        bar: F32 = np.full(m, -np.inf, dtype=np.float32)
        rows_of = np.arange(m)[:, None]
        for start in range(0, self.n, block):
            stop = min(start + block, self.n)
            keys = q2 @ self.emb[start:stop].T  # (matmul into a given out= skips BLAS)
            np.multiply(keys, scale[start:stop], out=keys)
            width = keys.shape[1]
            if best_key.shape[1] == 0 and width >= kk:  # the first block: its best kk
                part = np.argpartition(keys, width - kk, axis=1)[:, width - kk :]
                best_idx, best_key = part + start, np.take_along_axis(keys, part, 1)
                bar = best_key.min(axis=1)
                continue
            if best_key.shape[1] < kk:  # blocks narrower than kk: every key, then the best
                all_key = np.concatenate([best_key, keys], axis=1)
                all_idx = np.concatenate(
                    [best_idx, np.broadcast_to(np.arange(start, start + width), (m, width))],
                    axis=1,
                )
                if all_key.shape[1] > kk:
                    keep = np.argpartition(all_key, all_key.shape[1] - kk, axis=1)[:, -kk:]
                    all_key, all_idx = all_key[rows_of, keep], all_idx[rows_of, keep]
                best_key, best_idx = all_key, all_idx
                if best_key.shape[1] == kk:
                    bar = best_key.min(axis=1)
                continue
            above = keys > bar[:, None]
            counts = above.sum(axis=1)
            wide = int(counts.max())
            if wide == 0:
                continue
            # the keys above each query's bar, packed left in a (queries, wide) array
            r, c = np.nonzero(above)
            slot = np.arange(len(r)) - np.repeat(np.cumsum(counts) - counts, counts)
            cand_key = np.full((m, wide), -np.inf, dtype=np.float32)
            cand_idx = np.zeros((m, wide), dtype=np.intp)
            cand_key[r, slot] = keys[r, c]
            cand_idx[r, slot] = c + start
            all_key = np.concatenate([best_key, cand_key], axis=1)
            all_idx = np.concatenate([best_idx, cand_idx], axis=1)
            keep = np.argpartition(all_key, all_key.shape[1] - kk, axis=1)[:, -kk:]
            best_key = all_key[rows_of, keep]
            best_idx = all_idx[rows_of, keep]
            bar = best_key.min(axis=1)
        return best_idx, best_key

    @staticmethod
    def _exact(keys: F32, ranked: npt.NDArray[np.bool_], k: int) -> npt.NDArray[np.intp]:
        """Top-k among ranked rows with a positive key (fewer than k may exist)."""
        cand = np.flatnonzero(ranked & (keys > 0))
        if len(cand) > k:
            cand = cand[np.argpartition(keys[cand], len(cand) - k)[len(cand) - k :]]
        return cand

    def _hits(self, q: F32, top: npt.NDArray[np.intp], now: float) -> list[RecallHit]:
        if len(top) == 0:
            return []
        sims = self.emb[top].astype(np.float64) @ q.astype(np.float64)
        m_now = self.at(now)[0]
        hits = []
        for pos, sim in zip(top.tolist(), sims.tolist(), strict=True):
            rec = math.exp(-(now - float(self.last_access[pos])) / self.recency_tau)
            m = float(m_now[pos])
            t = float(self.trust[pos])
            s = max(0.0, sim)
            if s * m * rec * t <= 0.0:
                # the float32 key was a rounding error above zero: no relevance, no hit
                continue
            hits.append(
                RecallHit(
                    self.ids[pos].tobytes().hex(),
                    int(self.rowid[pos]),
                    s * m * rec * t,
                    s,
                    m,
                    rec,
                    t,
                )
            )
        hits.sort(key=lambda h: (-h.score, h.id))
        return hits

    def nbytes(self) -> int:
        """Bytes held by the index arrays (used rows only, for per-memory figures)."""
        per_row = (
            self.emb.itemsize * self.dim
            + 16
            + sum(np.dtype(t).itemsize for _, t in self._COLUMNS)
            + self.pos_of_rowid.itemsize
        )
        return per_row * self.n

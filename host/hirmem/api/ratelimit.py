"""A token bucket per principal: ``rate`` requests a second, bursts of ``burst``.

Bounded: one bucket per token id that authenticated (tokens are rows an admin made), and
buckets full again are dropped when the table passes ``max_buckets``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable


class RateLimiter:
    def __init__(
        self,
        rate: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        max_buckets: int = 10_000,
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a rate limit needs rate > 0 and burst >= 1")
        self.rate, self.burst, self.clock = rate, float(burst), clock
        self.max_buckets = max_buckets
        self._buckets: dict[str, tuple[float, float]] = {}  # key → (tokens, at)
        self._lock = threading.Lock()
        self.limited = 0  # requests refused, for the metrics

    def take(self, key: str) -> float:
        """0 when a request may go ahead (one token taken), else the seconds to wait."""
        now = self.clock()
        with self._lock:
            tokens, at = self._buckets.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - at) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                if len(self._buckets) > self.max_buckets:
                    self._forget_full(now)
                return 0.0
            self._buckets[key] = (tokens, now)
            self.limited += 1
            return (1.0 - tokens) / self.rate

    def _forget_full(self, now: float) -> None:
        full = [k for k, (t, at) in self._buckets.items()
                if t + (now - at) * self.rate >= self.burst]  # fmt: skip
        for k in full:
            del self._buckets[k]


def retry_after(wait: float) -> str:
    """The Retry-After header value: whole seconds, at least 1."""
    return str(max(1, math.ceil(wait)))

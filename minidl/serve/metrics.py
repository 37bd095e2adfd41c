"""Serving metrics in Prometheus' text format (0.0.4), written by hand: prometheus_client is not a dependency and
a few families do not need it. Updated from the event loop; a lock keeps a scrape consistent anyway."""
from __future__ import annotations

import bisect
import threading

__all__ = ["Metrics"]

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class _Histogram:
    def __init__(self, buckets: tuple):
        self.buckets, self.counts, self.sum, self.count = buckets, [0] * len(buckets), 0.0, 0

    def observe(self, value: float) -> None:
        index = bisect.bisect_left(self.buckets, value)
        if index < len(self.counts):
            self.counts[index] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str, labels: str = "") -> list:
        sep = "," if labels else ""
        out, cumulative = [], 0
        for bound, count in zip(self.buckets, self.counts):
            cumulative += count
            out.append(f'{name}_bucket{{{labels}{sep}le="{bound}"}} {cumulative}')
        out.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {self.count}')
        braces = f"{{{labels}}}" if labels else ""
        return out + [f"{name}_sum{braces} {self.sum}", f"{name}_count{braces} {self.count}"]


class Metrics:
    """Requests by route and status, request latency by route, examples per model call, examples waiting; for a
    generating model, tokens generated and the sequences running and queued (read from ``sequences``, a callable
    giving ``(running, queued)``, when a scrape renders them)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.requests: dict = {}          # (route, status) -> count
        self.latency: dict = {}           # route -> _Histogram
        self.batch_size = _Histogram(BATCH_BUCKETS)
        self.queue_length = 0
        self.generated_tokens = 0
        self.sequences = None

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[route, status] = self.requests.get((route, status), 0) + 1
            self.latency.setdefault(route, _Histogram(LATENCY_BUCKETS)).observe(seconds)

    def observe_batch(self, size: int) -> None:
        with self._lock:
            self.batch_size.observe(size)

    def count_tokens(self, count: int) -> None:
        with self._lock:
            self.generated_tokens += count

    def render(self) -> str:
        with self._lock:
            lines = ["# HELP minidl_requests_total HTTP requests by route and status.",
                     "# TYPE minidl_requests_total counter"]
            lines += [f'minidl_requests_total{{route="{route}",status="{status}"}} {count}'
                      for (route, status), count in sorted(self.requests.items())]
            lines += ["# HELP minidl_request_duration_seconds Time from request to response, by route.",
                      "# TYPE minidl_request_duration_seconds histogram"]
            for route, histogram in sorted(self.latency.items()):
                lines += histogram.lines("minidl_request_duration_seconds", f'route="{route}"')
            lines += ["# HELP minidl_batch_size Examples per model call.", "# TYPE minidl_batch_size histogram"]
            lines += self.batch_size.lines("minidl_batch_size")
            lines += ["# HELP minidl_queue_length Examples waiting for a model call.",
                      "# TYPE minidl_queue_length gauge", f"minidl_queue_length {self.queue_length}"]
            if self.sequences is not None:
                running, queued = self.sequences()
                lines += ["# HELP minidl_generated_tokens_total Tokens generated.",
                          "# TYPE minidl_generated_tokens_total counter",
                          f"minidl_generated_tokens_total {self.generated_tokens}",
                          "# HELP minidl_running_sequences Sequences decoding in the batch.",
                          "# TYPE minidl_running_sequences gauge", f"minidl_running_sequences {running}",
                          "# HELP minidl_queued_sequences Sequences waiting for a place in the batch.",
                          "# TYPE minidl_queued_sequences gauge", f"minidl_queued_sequences {queued}"]
        return "\n".join(lines) + "\n"

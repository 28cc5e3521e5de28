"""Batches made ahead of the step that needs them, on a background thread.

The train step is dispatched asynchronously, so while the device (or XLA's CPU threads) runs
step N the host is free; the prefetcher uses that time to generate and transfer the batches of
the next ``depth`` steps. Every batch is still ``batch(data_step)``, a pure function of the
step, so prefetching changes when a batch is made, never what it holds: runs are bit-identical
with and without it, and resuming needs no prefetcher state.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any


class Prefetcher:
    """``prefetcher(step)`` returns ``batch(step)`` and starts ``batch(step + 1 .. + depth)``
    (never past ``end``); with ``depth`` 0 it only calls ``batch``. A context manager: leaving
    it drops what was made ahead and stops the thread."""

    def __init__(self, batch: Callable[[int], Any], depth: int, end: int):
        self.batch, self.depth, self.end = batch, depth, end
        self.pool = (concurrent.futures.ThreadPoolExecutor(max_workers=1,
                                                           thread_name_prefix="prefetch")
                     if depth > 0 else None)
        self.pending: dict[int, concurrent.futures.Future] = {}

    def __call__(self, data_step: int) -> Any:
        if self.pool is None:
            return self.batch(data_step)
        future = self.pending.pop(data_step, None)
        for stale in [s for s in self.pending if s < data_step]:  # a jump (not in order)
            self.pending.pop(stale).cancel()
        for ahead in range(data_step + 1, min(data_step + 1 + self.depth, self.end)):
            if ahead not in self.pending:
                self.pending[ahead] = self.pool.submit(self.batch, ahead)
        return future.result() if future is not None else self.batch(data_step)

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for future in self.pending.values():
            future.cancel()
        self.pending.clear()
        if self.pool is not None:
            self.pool.shutdown(wait=True)

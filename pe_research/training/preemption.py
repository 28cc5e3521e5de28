"""Preemption: a cluster ends a job with SIGTERM (or warns of its time limit with SIGUSR1, or,
through submitit, SIGUSR2); a person presses Ctrl-C (SIGINT).

While ``watch()`` is active those signals only set a flag; the step loop finishes the call in
flight, checkpoints that step, flushes the metrics and raises ``PreemptedError``, and rerunning the
same command continues from that step, as from any checkpoint: no step is lost. A second Ctrl-C
stops at once (``KeyboardInterrupt``), losing the steps since the last checkpoint.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

import jax
import numpy as np

# SIGUSR2: submitit's signal ahead of a SLURM time limit (submitit then requeues the job).
SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
EXIT_CODE = 75  # sysexits' EX_TEMPFAIL: stopped from outside, run the same command again
INTERRUPTED_EXIT = 128 + signal.SIGINT  # what a shell reports for a Ctrl-C


class PreemptedError(Exception):
    """Training stopped on a signal after checkpointing ``step``."""

    def __init__(self, step: int, signal_number: int):
        self.step, self.signal_number = step, signal_number
        name = signal.Signals(signal_number).name
        stopped = "interrupted" if signal_number == signal.SIGINT else "preempted"
        super().__init__(f"{stopped} at step {step} ({name}); rerun the same command to "
                         "continue")


class Flag:
    """Which signal arrived, if any."""

    def __init__(self) -> None:
        self.received: int | None = None

    def set(self, number: int, _frame: object = None) -> None:
        self.received = number

    def interrupt(self, number: int, _frame: object = None) -> None:
        """Ctrl-C: stop as on SIGTERM, and let a second Ctrl-C stop at once."""
        self.set(number)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        print("\ninterrupted: checkpointing after the steps in flight (Ctrl-C again stops at "
              "once, losing the steps since the last checkpoint)", file=sys.stderr, flush=True)

    def raised(self) -> bool:
        """Whether to stop now; with several processes, whether any process was signalled, so
        that every process stops after the same step."""
        local = self.received is not None
        if jax.process_count() == 1:
            return local
        from jax.experimental import multihost_utils

        return bool(np.any(multihost_utils.process_allgather(np.int32(local))))



@contextlib.contextmanager
def watch() -> Iterator[Flag]:
    """Route ``SIGNALS`` and Ctrl-C to a ``Flag`` for the duration (main thread only; elsewhere
    the flag stays unset and the signals keep their handlers). A SIGINT ignored from the start
    (a background job of a shell) stays ignored."""
    flag = Flag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous = {number: signal.signal(number, flag.set) for number in SIGNALS}
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, flag.interrupt)
    try:
        yield flag
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)

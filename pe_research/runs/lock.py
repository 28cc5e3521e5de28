"""One writer per run directory: an exclusive ``flock`` on ``RUN_DIR/.lock``.

The kernel drops the lock when its process exits, however it exits, so a lock left by a killed
run never blocks a resume. ``flock`` works on local file systems and on NFSv4, Lustre and GPFS
mounted with lock support; on a file system without it (some NFSv3 mounts, ``nolock``) the lock
always succeeds and two trainings on one run directory are not prevented.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path
from types import TracebackType

from pe_research.core.errors import UsageError

LOCK_FILE = ".lock"


class RunDirBusyError(UsageError):
    """Another process holds the run directory's lock."""


class RunDirLock:
    """Held by the one process (process 0) that writes a run directory, for the run's lifetime."""

    def __init__(self, run_dir: str | Path, activity: str = "trained"):
        self.path = Path(run_dir) / LOCK_FILE
        self.activity = activity  # what the holder is doing, for the message
        self.fd: int | None = None

    def acquire(self) -> RunDirLock:
        """Take the lock or raise ``RunDirBusyError`` at once, naming the holder's PID and host."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").split()
            os.close(fd)
            pid, host = (holder + ["?", "?"])[:2]
            raise RunDirBusyError(
                f"{self.path.parent} is being {self.activity} by process {pid} on {host} (lock "
                f"{self.path}); wait for it to finish, stop it, or use another --workdir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
        self.fd = fd
        return self

    def release(self) -> None:
        """Let the next writer in (the file stays: removing it would race with a new holder)."""
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> RunDirLock:
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.release()

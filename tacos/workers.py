"""Helper processes that never outlive tacos.

A worker process (greedy trials, an isolated ILP back end, the CBC binary) must end when the
process that started it ends, however it ends: an exception, Ctrl-C, SIGTERM or even SIGKILL.
The parent stops its workers on the way out (``Pool.terminate``, ``Popen.kill``); as a second
line, each worker asks the kernel to kill it when its parent dies (Linux ``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int | None = None) -> bool:
    """Have the kernel send SIGKILL to this process when its parent exits (Linux only).

    ``parent`` is the pid the parent had when it started us: if it is gone already (it died
    before this call), exit at once.  Returns True when the kernel will do it.
    """
    armed = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            armed = libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if parent is not None and os.getppid() != parent:
        os._exit(1)
    return armed

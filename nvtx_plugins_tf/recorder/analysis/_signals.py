"""SIGINT, SIGTERM and SIGHUP held back while ``analyze`` does what must not be cut in the
middle (moving its outputs in, removing a hidden folder, starting a Dask cluster), then
handled as they would have been."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

__all__ = ["held"]

_HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP held back, then handled as before once it ends (the first
    one that came). Python runs signal handlers in the main thread whichever thread the
    signal reached (a thread's mask would hold it for that thread only), so the handlers are
    swapped there; in another thread, and for a handler not installed from Python, nothing
    is held."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    old = {s: signal.getsignal(s) for s in _HELD}
    old = {s: h for s, h in old.items() if h is not None}
    for signo in old:
        signal.signal(signo, lambda signo, _frame: caught.append(signo))
    try:
        yield
    finally:
        for signo, handler in old.items():
            signal.signal(signo, handler)
        for signo in caught[:1]:
            if callable(old[signo]):
                old[signo](signo, None)
            elif old[signo] == signal.SIG_DFL:
                os.kill(os.getpid(), signo)

"""SIGINT, SIGTERM and SIGHUP held back while a command does what must not be cut in the
middle (a temporary file made and owned by its cleanup in one step, outputs moved in, a
hidden folder removed, a Dask cluster started), then delivered as they would have been.

The one such mechanism of the package: ``export``, ``merge``, ``pack``, ``record``'s export and
``analyze`` all hold signals through :func:`held`.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = ["HELD_SIGNALS", "held"]

#: The signals :func:`held` holds (those the command line ends a command with).
HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP while the block runs, then deliver each one that came,
    once, to its disposition as it was (a handler, or the default: the process ends by it).

    Python runs signal handlers in the main thread whichever thread the signal reached (a
    thread's mask would hold it for that thread only), so the handlers are swapped there; in
    another thread, and for a handler not installed from Python (``getsignal`` gives None),
    nothing is held. A signal whose delivery to another thread is still under way when the
    block ends finds the disposition as it was: the command line's handlers end the process
    with 128 + its number however late it comes (:mod:`nvtx_plugins_tf.cli._common`).

    >>> import os
    >>> got = []
    >>> old = signal.signal(signal.SIGHUP, lambda signo, _frame: got.append(signo))
    >>> with held():
    ...     os.kill(os.getpid(), signal.SIGHUP)
    ...     held_back = got == []
    >>> held_back, got == [signal.SIGHUP]
    (True, True)
    >>> _ = signal.signal(signal.SIGHUP, old)
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    saved = {}
    try:
        for signo in HELD_SIGNALS:
            if signal.getsignal(signo) is not None:
                saved[signo] = signal.signal(signo, lambda n, _frame: arrived.append(n))
        yield
    finally:
        for signo, handler in saved.items():
            signal.signal(signo, handler)
        for signo in dict.fromkeys(arrived):
            signal.raise_signal(signo)  # (a handler runs before the next bytecode)

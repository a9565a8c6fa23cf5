"""Capture the NVTX ranges a block of code emits, as recorded by the native recorder.

    from nvtx_plugins_tf.testing import capture

    with capture() as cap:
        model.fit(...)
    assert cap.count(message="Dense 1", domain="tf") == 10

``capture()`` points the in-process recorder (``libnvtx_recorder.so``, attached through
``NVTX_INJECTION64_PATH``) at a fresh directory on entry and at another fresh one on
exit, then reads what was recorded in between -- by every thread of the process. It
needs the recorder attached before the process' first NVTX call: run the tests with the
pytest plugin (``nvtx_plugins_tf.testing.pytest_plugin``, automatic once the package is
installed) or under ``python -m nvtx_plugins_tf record``.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import tempfile
import threading

__all__ = ["capture", "Capture", "RecorderNotAttached", "recorder_library", "recorder_attached"]

INJECTION_ENV = "NVTX_INJECTION64_PATH"
RECORD_DIR_ENV = "NVTX_TF_RECORD_DIR"

_lock = threading.Lock()
_lib = None
_after_dirs: list[str] = []


@atexit.register
def _cleanup_after_dirs():
    for d in _after_dirs:
        shutil.rmtree(d, ignore_errors=True)


class RecorderNotAttached(RuntimeError):
    """The native NVTX recorder is not attached to this process."""


def _bind(lib):
    lib.nvtx_recorder_attached.restype = ctypes.c_int
    lib.nvtx_recorder_attached.argtypes = []
    lib.nvtx_recorder_set_output_dir.restype = ctypes.c_int
    lib.nvtx_recorder_set_output_dir.argtypes = [ctypes.c_char_p]
    lib.nvtx_recorder_output_dir.restype = ctypes.c_char_p
    lib.nvtx_recorder_output_dir.argtypes = []
    lib.nvtx_recorder_event_count.restype = ctypes.c_uint64
    lib.nvtx_recorder_event_count.argtypes = []
    return lib


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def recorder_library():
    """The recorder library instance NVTX uses in this process (ctypes), or raise.

    Attached means: NVTX already loaded the library (``nvtx_recorder_attached() > 0``), or
    ``NVTX_INJECTION64_PATH`` names it so the first NVTX call will load this very
    instance (ctypes and NVTX's dlopen share one copy of a library).
    """
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        env_path = os.environ.get(INJECTION_ENV, "")
        candidates = []
        if env_path:
            candidates.append(env_path)
        try:
            from .._native_libs import native_library

            ours = str(native_library("recorder"))
            candidates.append(ours)
        except ImportError:
            ours = None
        for path in candidates:
            try:
                lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | ctypes.RTLD_GLOBAL, use_errno=True)
            except OSError:
                continue
            if hasattr(lib, "nvtx_recorder_attached"):
                lib = _bind(lib)
                if lib.nvtx_recorder_attached() > 0:
                    _lib = lib
                    return lib
        if env_path and ours and _same_file(env_path, ours):
            _lib = _bind(ctypes.CDLL(env_path, mode=ctypes.RTLD_GLOBAL, use_errno=True))
            return _lib
        raise RecorderNotAttached(
            "the NVTX recorder is not attached to this process: "
            f"{INJECTION_ENV} must name libnvtx_recorder.so before the process' first NVTX call "
            f"(currently {env_path or 'unset'}). Use the pytest plugin "
            "(-p nvtx_plugins_tf.testing.pytest_plugin, automatic when the package is installed), "
            "run under `python -m nvtx_plugins_tf record -o PREFIX -- COMMAND`, or set "
            f"{INJECTION_ENV}=<nvtx_plugins_tf.recorder.library_path()> before starting Python."
        )


def recorder_attached() -> bool:
    try:
        recorder_library()
        return True
    except RecorderNotAttached:
        return False


class Capture:
    """What a :func:`capture` block recorded.

    Filled when the block exits -- or earlier, on the first access to its results
    (``ranges``, ``open_ranges``, ``marks``, ``events``, ``find``, ``count``) or an
    explicit :meth:`stop`, which ends the capture at that point. This is what makes the
    ``nvtx_capture`` fixture usable inside the test body.
    """

    def __init__(self, directory: str, keep: bool = False):
        self.directory = directory
        self.keep = keep
        self.processes = {}
        self.thread_names = {}
        self.damage = None
        self.done = False
        self._previous = ""
        self._events = []
        self._ranges = []
        self._open = []
        self._marks = []

    # Results ------------------------------------------------------------------------
    @property
    def events(self):
        """All recorded ranges and marks, by start time."""
        self.stop()
        return self._events

    @property
    def ranges(self):
        """Closed push/pop and start/end ranges."""
        self.stop()
        return self._ranges

    @property
    def open_ranges(self):
        """Ranges still open when the capture stopped."""
        self.stop()
        return self._open

    @property
    def marks(self):
        self.stop()
        return self._marks

    @property
    def damaged_chunks(self) -> int:
        self.stop()
        return self.damage.damaged_chunks if self.damage else 0

    def find(self, message=None, domain=None, kind=None, category=None):
        """Events matching all given attributes (message, domain, kind, category name or number)."""
        out = []
        for r in self.events:
            if message is not None and r.message != message:
                continue
            if domain is not None and r.domain != domain:
                continue
            if kind is not None and r.kind != kind:
                continue
            if category is not None and category not in (r.category, r.category_name):
                continue
            out.append(r)
        return out

    def count(self, message=None, domain=None, kind=None, category=None) -> int:
        return len(self.find(message, domain, kind, category))

    def messages(self) -> list[str]:
        return [r.message for r in self.events]

    # Control ------------------------------------------------------------------------
    def _start(self) -> None:
        lib = recorder_library()
        self._previous = (lib.nvtx_recorder_output_dir() or b"").decode()
        if lib.nvtx_recorder_set_output_dir(self.directory.encode()) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"nvtx_recorder_set_output_dir({self.directory}) failed: {os.strerror(err)}")

    def stop(self) -> "Capture":
        """End the capture (the recorder moves to a fresh directory) and read it."""
        if self.done:
            return self
        self.done = True
        lib = recorder_library()
        after = tempfile.mkdtemp(prefix="nvtx_tf_after_")
        lib.nvtx_recorder_set_output_dir(after.encode())
        with _lock:
            # Our own previous "after" dirs are scratch: drop them.
            for old in list(_after_dirs):
                if old == self._previous:
                    shutil.rmtree(old, ignore_errors=True)
                    _after_dirs.remove(old)
            _after_dirs.append(after)
        from ..recorder.reader import load

        try:
            recording = load(self.directory)
        finally:
            if not self.keep:
                shutil.rmtree(self.directory, ignore_errors=True)
        self._events = list(recording.ranges)
        self._marks = [r for r in self._events if r.kind == "mark"]
        self._open = [r for r in self._events if r.kind != "mark" and r.end_ns is None]
        self._ranges = [r for r in self._events if r.kind != "mark" and r.end_ns is not None]
        self.processes = recording.processes
        self.thread_names = recording.thread_names
        self.damage = recording.damage
        return self

    def __repr__(self):
        if not self.done:
            return f"<Capture running into {self.directory}>"
        return f"<Capture {len(self.ranges)} ranges, {len(self.open_ranges)} open, {len(self.marks)} marks>"


class _CaptureContext:
    def __init__(self, keep: bool):
        self.keep = keep
        self.capture: Capture | None = None

    def __enter__(self) -> Capture:
        recorder_library()
        directory = tempfile.mkdtemp(prefix="nvtx_tf_capture_")
        self.capture = Capture(directory, self.keep)
        try:
            self.capture._start()
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        return self.capture

    def __exit__(self, *exc):
        self.capture.stop()
        return False


def capture(keep: bool = False) -> _CaptureContext:
    """Context manager yielding a :class:`Capture`; ``keep=True`` keeps the raw directory.

    Raises :class:`RecorderNotAttached` (a RuntimeError) when the recorder is not attached.
    """
    return _CaptureContext(keep)

"""Capture the NVTX ranges a block of code emits, as recorded by the native recorder.

    from nvtx_plugins_tf.testing import capture

    with capture() as cap:
        model.fit(...)
    assert cap.count(message="Dense 1", domain="tf") == 10

``capture()`` reads a window of the recording the in-process recorder
(``libnvtx_recorder.so``, attached through ``NVTX_INJECTION64_PATH``) is making anyway:
on entry and on exit it asks the recorder to start a new segment file in the *same*
recording folder (``nvtx_recorder_new_segment``), and reads back only the segments
opened in between -- every thread of the process, and the processes it forked or
started meanwhile. Nothing is taken away from the enclosing recording: under
``python -m nvtx_plugins_tf record -- pytest`` the outer recording still holds every
range, inside and after the block (its reader continues ranges across the extra
segments of a process). Under the pytest plugin the enclosing recording is the
session's scratch folder. It needs the recorder attached before the process' first
NVTX call: run the tests with the pytest plugin (``nvtx_plugins_tf.testing.pytest_plugin``,
automatic once the package is installed) or under ``python -m nvtx_plugins_tf record``.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import tempfile
import threading
from typing import TYPE_CHECKING

from .._native_libs import INJECTION_ENV, RECORD_DIR_ENV  # the one owner of these names

if TYPE_CHECKING:
    from ..recorder.recording.model import DamageReport, Range, Recording

# The recorder's reader (numpy, the native decoder) is imported where a capture is read,
# not here: the pytest plugin imports this module in every test session.

__all__ = ["capture", "Capture", "RecorderNotAttached", "recorder_library", "recorder_attached"]


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
    lib.nvtx_recorder_new_segment.restype = ctypes.c_uint64
    lib.nvtx_recorder_new_segment.argtypes = []
    if hasattr(lib, "nvtx_recorder_set_capture_range"):  # (an older library has no capture range)
        lib.nvtx_recorder_set_capture_range.restype = ctypes.c_int
        lib.nvtx_recorder_set_capture_range.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        lib.nvtx_recorder_capture_windows.restype = ctypes.c_uint64
        lib.nvtx_recorder_capture_windows.argtypes = []
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
            if hasattr(lib, "nvtx_recorder_new_segment"):
                lib = _bind(lib)
                if lib.nvtx_recorder_attached() > 0:
                    _lib = lib
                    return lib
        if env_path and ours and _same_file(env_path, ours) and os.environ.get(RECORD_DIR_ENV):
            _lib = _bind(ctypes.CDLL(env_path, mode=ctypes.RTLD_GLOBAL, use_errno=True))
            return _lib
        if env_path and ours and not _same_file(env_path, ours):
            raise RecorderNotAttached(_another_copy_message(env_path, ours))
        # (Without a recording folder the recorder declines NVTX's initialization, so a
        # capture would silently hold nothing: say so instead.)
        raise RecorderNotAttached(
            "the NVTX recorder is not attached to this process: "
            f"{INJECTION_ENV} must name libnvtx_recorder.so and {RECORD_DIR_ENV} a folder before the "
            f"process' first NVTX call (currently {INJECTION_ENV}={env_path or 'unset'}, "
            f"{RECORD_DIR_ENV}={os.environ.get(RECORD_DIR_ENV) or 'unset'}). Use the pytest plugin "
            "(-p nvtx_plugins_tf.testing.pytest_plugin, automatic when the package is installed), "
            "run under `python -m nvtx_plugins_tf record -o PREFIX -- COMMAND`, or set both from "
            "nvtx_plugins_tf.recorder.environment(FOLDER) before starting Python."
        )


def _another_copy_message(env_path: str, ours: str) -> str:
    """Why a capture cannot use the recorder ``NVTX_INJECTION64_PATH`` names: it is not the
    copy this package attaches (and checked before loading it)."""
    try:
        ctypes.CDLL(env_path, mode=os.RTLD_NOLOAD)
        state = "loaded by NVTX but not recording"
    except OSError:
        state = "not loaded: no NVTX call so far" if os.path.exists(env_path) else "no such file"
    return (
        f"the NVTX recorder is not attached to this process: {INJECTION_ENV} names {env_path} "
        f"({state}), another copy of the recorder than the one this package attaches ({ours}). "
        f"Set {INJECTION_ENV}={ours} (nvtx_plugins_tf.recorder.environment(FOLDER) gives it, with "
        f"{RECORD_DIR_ENV}) before starting Python, or run under "
        "`python -m nvtx_plugins_tf record -o PREFIX -- COMMAND`."
    )


def recorder_attached() -> bool:
    try:
        recorder_library()
        return True
    except RecorderNotAttached:
        return False


class Capture:
    """What a :func:`capture` block recorded: a :class:`~nvtx_plugins_tf.recorder.Recording`
    of the window (:attr:`recording`), with the same words: ``events`` (every range and
    mark, by start time), ``ranges`` (the closed ranges), ``open_ranges``, ``marks``,
    ``find(...)`` and ``count(...)`` mean what they mean on a Recording.

    Filled when the block exits -- or earlier, on the first access to its results
    (``ranges``, ``open_ranges``, ``marks``, ``events``, ``find``, ``count``) or an
    explicit :meth:`stop`, which ends the capture at that point. This is what makes the
    ``nvtx_capture`` fixture usable inside the test body.
    """

    def __init__(self, directory: str, keep: bool = False, capture_range=None, capture_range_end: str = "stop"):
        #: the recording folder the window was read from (with ``keep=True``: a folder
        #: holding a copy of the window's segment files)
        self.directory = directory
        self.keep = keep
        self.segments: list[str] = []
        self._window = (0, 0)
        #: the window as a Recording (None until the capture stopped)
        self.recording: Recording | None = None
        self.done = False
        self._previous = ""
        #: ``NAME[@DOMAIN]``: only the events inside the windows this range opened (as
        #: ``record --capture-range``); None: everything the block emitted
        self.capture_range = capture_range
        self.capture_range_end = capture_range_end
        #: capture windows the range opened during the block (with ``capture_range``)
        self.windows = 0

    # Results ------------------------------------------------------------------------
    def _recording(self) -> Recording:
        self.stop()
        return self.recording

    @property
    def events(self) -> list[Range]:
        """All recorded ranges and marks, by start time."""
        return self._recording().events

    @property
    def ranges(self) -> list[Range]:
        """Closed push/pop and start/end ranges, by start time."""
        return self._recording().ranges

    @property
    def open_ranges(self) -> list[Range]:
        """Ranges still open when the capture stopped."""
        return self._recording().open_ranges

    @property
    def marks(self) -> list[Range]:
        return self._recording().marks

    @property
    def processes(self) -> dict:
        return self.recording.processes if self.recording else {}

    @property
    def thread_names(self) -> dict:
        return self.recording.thread_names if self.recording else {}

    @property
    def damage(self) -> DamageReport | None:
        return self.recording.damage if self.recording else None

    @property
    def damaged_chunks(self) -> int:
        return self._recording().damage.damaged_chunks

    def find(self, message=None, domain=None, kind=None, category=None) -> list[Range]:
        """Events matching all given attributes (message, domain, kind, category name or number)."""
        return self._recording().find(message, domain, kind, category)

    def count(self, message=None, domain=None, kind=None, category=None) -> int:
        return self._recording().count(message, domain, kind, category)

    def messages(self) -> list[str]:
        return [r.message for r in self.events]

    # Control ------------------------------------------------------------------------
    def _start(self) -> None:
        lib = recorder_library()
        self._previous = (lib.nvtx_recorder_output_dir() or b"").decode()
        if not self._previous:
            # Attached without a recording folder: record into a scratch one from now on.
            scratch = tempfile.mkdtemp(prefix="nvtx_tf_scratch_")
            if lib.nvtx_recorder_set_output_dir(scratch.encode()) != 0:
                err = ctypes.get_errno()
                shutil.rmtree(scratch, ignore_errors=True)
                raise OSError(err, f"nvtx_recorder_set_output_dir({scratch}) failed: {os.strerror(err)}")
            with _lock:
                _after_dirs.append(scratch)
            self._previous = (lib.nvtx_recorder_output_dir() or b"").decode()
        self.directory = self._previous
        if self.capture_range is not None and not hasattr(lib, "nvtx_recorder_set_capture_range"):
            raise RecorderNotAttached("capture_range: the attached recorder library has no capture range; rebuild it")
        begin = lib.nvtx_recorder_new_segment()
        if not begin:
            raise OSError(f"the NVTX recorder could not start a new segment in {self.directory!r}")
        if self.capture_range is not None:
            end = self.capture_range_end.encode()
            if lib.nvtx_recorder_set_capture_range(self.capture_range.encode(), end) != 0:
                raise ValueError(
                    f"capture_range={self.capture_range!r}, capture_range_end={self.capture_range_end!r}: expected "
                    "NAME, NAME@DOMAIN or NAME@* and stop, none, repeat or repeat:N"
                )
        self._window = (begin, 0)

    def _window_segments(self) -> list[str]:
        """Segment files opened during the window by this process and its descendants."""
        begin, end = self._window
        headers = []
        for path in _segment_paths(self.directory):
            head = _read_header(path)
            if head is not None and begin <= head[2] < end:
                headers.append((head[2], head[0], head[1], path))
        pids = {os.getpid()}
        out = []
        for _start, pid, ppid, path in sorted(headers):
            if pid in pids or ppid in pids:
                pids.add(pid)
                out.append(path)
        return out

    def stop(self) -> "Capture":
        """End the capture (the recorder starts another segment) and read the window."""
        if self.done:
            return self
        self.done = True
        lib = recorder_library()
        if self.capture_range is not None:
            self.windows = int(lib.nvtx_recorder_capture_windows())
            lib.nvtx_recorder_set_capture_range(None, None)  # everything is written again
        end = lib.nvtx_recorder_new_segment()
        self._window = (self._window[0], end or (1 << 64) - 1)
        self.segments = self._window_segments()
        if self.keep:
            copy = tempfile.mkdtemp(prefix="nvtx_tf_capture_")
            for path in self.segments:
                shutil.copy2(path, copy)
            self.directory = copy
            self.segments = [os.path.join(copy, os.path.basename(p)) for p in self.segments]
        from ..recorder.recording.reader import load

        self.recording = load(self.directory, segments=self.segments)
        return self

    def __repr__(self):
        if not self.done:
            return f"<Capture running into {self.directory}>"
        return f"<Capture {len(self.ranges)} ranges, {len(self.open_ranges)} open, {len(self.marks)} marks>"


def _segment_paths(directory: str) -> list[str]:
    from ..recorder.recording.reader import segment_files

    try:
        return [str(p) for p in segment_files(directory)]
    except OSError:
        return []


def _read_header(path: str):
    """(pid, ppid, start_ns) of a segment file, None when unreadable."""
    from ..recorder.recording._decoder import peek_segment

    info = peek_segment(path)
    return None if info is None else (info.pid, info.ppid, info.start_ns)


class _CaptureContext:
    def __init__(self, keep: bool, capture_range=None, capture_range_end: str = "stop"):
        if capture_range is not None and (not isinstance(capture_range, str) or not capture_range):
            raise TypeError(f"capture_range must be a non-empty str (NAME[@DOMAIN]), got {capture_range!r}")
        if not isinstance(capture_range_end, str):
            raise TypeError(f"capture_range_end must be a str, got {capture_range_end!r}")
        self.keep = keep
        self.capture_range = capture_range
        self.capture_range_end = capture_range_end
        self.capture: Capture | None = None

    def __enter__(self) -> Capture:
        recorder_library()
        self.capture = Capture("", self.keep, self.capture_range, self.capture_range_end)
        self.capture._start()
        return self.capture

    def __exit__(self, *exc):
        self.capture.stop()
        return False


def capture(keep: bool = False, capture_range: str | None = None, capture_range_end: str = "stop") -> _CaptureContext:
    """Context manager yielding a :class:`Capture`; ``keep=True`` keeps a copy of the raw
    segment files of the window in ``Capture.directory``.

    ``capture_range="NAME[@DOMAIN]"`` (and ``capture_range_end``: ``stop``, ``none``,
    ``repeat``, ``repeat:N``) keeps only the events inside the windows that range opens
    and closes during the block, decided in the recorder as ``record --capture-range``
    does (nsys's ``--capture-range=nvtx``); ``Capture.windows`` counts them. It replaces
    the process' own capture range for the block and clears it afterwards.

    Raises :class:`RecorderNotAttached` (a RuntimeError) when the recorder is not attached.
    """
    return _CaptureContext(keep, capture_range, capture_range_end)

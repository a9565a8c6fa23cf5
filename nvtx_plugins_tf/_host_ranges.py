"""Host-side NVTX ranges from Python: the one way NVTXCallback and NVTXHook emit theirs.

    from nvtx_plugins_tf import _host_ranges

    d = _host_ranges.domain("Keras")          # one object per name, process-wide
    if d.active:                              # False: nothing to emit to (see below)
        cat = d.category("phase: Train")      # nvtxDomainNameCategoryA, id from 1, once
        rid = d.start("batch 0", 0xFF17BECF, cat, 0)  # nvtxDomainRangeStartEx; int64 payload
        d.end(rid)                            # may be called on another thread
        rid = d.start_registered("profile", 0xFF76B900)  # message: a registered string
        d.end(rid)

The calls go to the NVTX C API directly, from our small ``libnvtx_host.so``
(``cc_ops/host/host_ranges.cc``, only the NVTX v3 headers) through ctypes. Not through the
``nvtx`` Python package: it emits nothing in a domain for which the attached tool does not
answer ``nvtxDomainIsEnabled``, and Nsight Systems 2022.4 does not, so those ranges were
invisible there. Plain ``nvtxDomainRangeStartEx`` reaches every NVTX v3 tool (Nsight
Systems of any age, our recorder).

Strings: messages go to NVTX as text (``NVTX_MESSAGE_TYPE_ASCII``), not as registered
strings: Nsight Systems exports a registered message only as ``NVTX_EVENTS.textId``, where
the old package's queries (``WHERE text LIKE 'Train'``) find nothing, and a tool keeps
every string registered with it. The exception is :meth:`Domain.start_registered`, for a
range a tool must match by name: nsys's ``--capture-range=nvtx`` looks only at registered
strings by default. Each domain keeps the events built for its texts (plain and
registered) in one bounded cache, at most :data:`MAX_CACHED_STRINGS` texts, the oldest
dropped first, so a name per step (``"step 12345"``) costs a fixed amount of memory
whatever the number of steps.

TensorFlow's profiler: while ``tf.profiler.experimental`` (or TensorBoard's profiler
callback) traces, each range and mark is also a TraceMe activity with the same message,
the domain and payload as its metadata (as the ops' ranges, ``cc_ops/tf_ops/trace_me_bridge.h``),
so the ``.xplane.pb`` host plane holds them. A range is then handed out as a
:class:`TracedRange` that :meth:`Domain.end` takes like an id.

Cost: :attr:`Domain.active` is false, and callers skip their calls (one attribute check),
when no NVTX tool is attached and TensorFlow is not loaded, or with ``NVTX_DISABLE`` set.
With TensorFlow loaded and no tool, a call checks whether TensorFlow's profiler traces
(one C++ call). With a tool, a range is one dict lookup and one ctypes call to start, one
to end (see ``benchmarks/bench_keras.py`` for the figures).
"""

from __future__ import annotations

import collections
import ctypes
import os
import threading

from nvtx_plugins_tf._native_libs import INJECTION_ENV as _INJECTION_ENV
from nvtx_plugins_tf._trace_me import TracedRange, _trace_me_api, _trace_me_kwargs

__all__ = [
    "Domain",
    "TracedRange",
    "domain",
    "enabled",
    "tool_attached",
    "color",
    "MAX_CACHED_STRINGS",
    "HostRangesUnavailable",
]

#: Registered strings kept per domain (oldest dropped first beyond this).
MAX_CACHED_STRINGS = 8192
_ABI_VERSION = 3
_UINT32_MAX = 0xFFFFFFFF

#: The ``nvtx`` package's color names and values (``nvtx.colors``), so that
#: ``colors={"batch": "red"}`` means what it meant when the callback used that package.
#: Other names go through matplotlib when it is installed (the ``plot`` extra).
COLOR_NAMES = {
    "green": 0x008000,
    "blue": 0x0000FF,
    "yellow": 0xFFFF00,
    "purple": 0x800080,
    "rapids": 0x7400FF,
    "cyan": 0x00FFFF,
    "red": 0xFF0000,
    "white": 0xFFFFFF,
    "darkgreen": 0x006400,
    "orange": 0xFFA500,
}


class HostRangesUnavailable(ImportError):
    """``libnvtx_host.so`` cannot be loaded (not built and not buildable, or out of date)."""


def enabled() -> bool:
    """False when ``NVTX_DISABLE`` is set (the ``nvtx`` package's switch): nothing is emitted."""
    return not os.environ.get("NVTX_DISABLE")


def color(value, argument: str = "color") -> int:
    """A 32-bit ARGB int from an int or a color name; 0 (no color) for None."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise TypeError(f"{argument} must be a color name or an ARGB int, got bool")
    if isinstance(value, int):
        if not 0 <= value <= _UINT32_MAX:
            raise ValueError(f"{argument} must be an ARGB value in [0, 0xFFFFFFFF], got {value}")
        return value
    if isinstance(value, str):
        if value in COLOR_NAMES:
            return COLOR_NAMES[value]
        try:
            import matplotlib.colors
        except ImportError as exc:
            raise ValueError(f"{argument}: unknown color {value!r} (install matplotlib for more names)") from exc
        try:
            r, g, b, a = matplotlib.colors.to_rgba(value)
        except ValueError as exc:
            raise ValueError(f"{argument}: unknown color {value!r}") from exc
        return (round(a * 255) << 24) | (round(r * 255) << 16) | (round(g * 255) << 8) | round(b * 255)
    raise TypeError(f"{argument} must be a color name or an ARGB int, got {type(value).__name__}")


# ----------------------------------------------------------------------------- library
_lock = threading.RLock()
_lib = None
_tool_bits: int | None = None
_EventBuffer = None  # ctypes array type of nvtx_host_event_size() bytes


def _bind(lib):
    vp, cp, u32, i32, i64, u64 = (
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_int64,
        ctypes.c_uint64,
    )
    signatures = {
        "nvtx_host_abi_version": (i32, []),
        "nvtx_host_tool_attached": (i32, []),
        "nvtx_host_domain_create": (vp, [cp]),
        "nvtx_host_register_string": (vp, [vp, cp]),
        "nvtx_host_name_category": (None, [vp, u32, cp]),
        "nvtx_host_event_size": (ctypes.c_size_t, []),
        "nvtx_host_event_init": (None, [vp, vp, vp, cp, u32, u32]),
        "nvtx_host_event_new": (vp, [vp, vp, cp, u32, u32]),
        "nvtx_host_event_start": (u64, [vp]),
        "nvtx_host_event_start_payload": (u64, [vp, i64]),
        "nvtx_host_range_end": (None, [vp, u64]),
        "nvtx_host_event_push": (i32, [vp]),
        "nvtx_host_event_push_payload": (i32, [vp, i64]),
        "nvtx_host_range_pop": (i32, [vp]),
        "nvtx_host_event_mark": (None, [vp]),
        "nvtx_host_event_mark_payload": (None, [vp, i64]),
    }
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def _library():
    """``libnvtx_host.so`` (ctypes), loaded and bound once; builds it when missing.

    Loaded as a ``PyDLL``: the calls keep the GIL (as the ``nvtx`` package's do), which
    saves its release and reacquisition on every range, and means no other thread can drop
    an event buffer from a cache while a call reads it."""
    global _lib, _EventBuffer
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            from nvtx_plugins_tf._native_libs import BUILD_COMMAND, native_library

            path = native_library("host")  # NativeLibraryMissing (an ImportError) names the fix
            try:
                lib = ctypes.PyDLL(str(path))
                if lib.nvtx_host_abi_version() != _ABI_VERSION:
                    raise HostRangesUnavailable(f"nvtx_plugins_tf: {path} is out of date; run: {BUILD_COMMAND}")
                lib = _bind(lib)
            except (OSError, AttributeError) as exc:
                message = f"nvtx_plugins_tf: cannot load {path} ({exc}); run: {BUILD_COMMAND}"
                raise HostRangesUnavailable(message) from exc
            _EventBuffer = ctypes.c_byte * lib.nvtx_host_event_size()
            _lib = lib
    return _lib


def tool_attached() -> bool:
    """True when an NVTX tool (Nsight Systems, our recorder ...) takes domain start/end
    ranges in this process. Initializes NVTX in ``libnvtx_host.so`` on first call (this is
    when the tool named by ``NVTX_INJECTION64_PATH`` is loaded, if not already). False
    under ``NVTX_DISABLE`` without loading anything."""
    global _tool_bits
    if not enabled():
        return False
    if _tool_bits is None:
        try:
            lib = _library()
        except ImportError:
            if not os.environ.get(_INJECTION_ENV):
                _tool_bits = 0  # nothing to emit to: no reason to fail without the library
                return False
            raise
        _tool_bits = lib.nvtx_host_tool_attached()
    return bool(_tool_bits & 1)


# ----------------------------------------------------------------------------- domains
class _Message(dict):
    """Cache entry of one text: its registered string handle (None for a plain text, or
    when the tool registers none), the bytes the events point at when there is no handle,
    and the events built on it, keyed ``color << 32 | category`` (each a buffer
    ``nvtx_host_event_init`` filled: domain + nvtxEventAttributes_t). A plain text is
    cached under the text, a registered one under the 1-tuple ``(text,)``: the same text
    may be both, as two entries."""

    __slots__ = ("handle", "raw")


_MAX_EVENTS_PER_MESSAGE = 16  # (color, category) pairs kept per text; more: start over


class Domain:
    """One NVTX domain: its handle, its registered-string cache and its categories.

    Obtain with :func:`domain` (one instance per name). ``name=None`` is NVTX's default
    domain. :attr:`nvtx`: an NVTX tool takes the calls; :attr:`active`: that, or
    TensorFlow's profiler may trace them (TensorFlow is loaded). When :attr:`active` is
    false every method returns at once (``start`` and ``push`` return 0). Thread-safe:
    ranges may start on one thread and end on another.
    """

    __slots__ = (
        "name",
        "active",
        "nvtx",
        "max_strings",
        "_trace_me",
        "_handle",
        "_strings",
        "_categories",
        "_miss_lock",
        "_start",
        "_start_payload",
        "_end",
        "_push",
        "_push_payload",
        "_pop",
        "_mark",
        "_mark_payload",
        "__weakref__",
    )

    def __init__(self, name: str | None, active: bool, max_strings: int = MAX_CACHED_STRINGS, trace_me=None):
        if name is not None and "\0" in name:
            raise ValueError("NVTX domain names must not contain NUL characters")
        self.name = name
        self.nvtx = active
        self._trace_me = trace_me  # TensorFlow's TraceMe binding, or None
        self.active = active or trace_me is not None
        self.max_strings = max_strings
        self._strings: collections.OrderedDict[str, _Message] = collections.OrderedDict()
        self._categories: dict[str, int] = {}
        self._miss_lock = threading.Lock()
        self._handle = ctypes.c_void_p(None)
        if self.nvtx:
            lib = _library()
            self._handle = ctypes.c_void_p(lib.nvtx_host_domain_create(None if name is None else name.encode()))
            self._start, self._start_payload = lib.nvtx_host_event_start, lib.nvtx_host_event_start_payload
            self._push, self._push_payload = lib.nvtx_host_event_push, lib.nvtx_host_event_push_payload
            self._mark, self._mark_payload = lib.nvtx_host_event_mark, lib.nvtx_host_event_mark_payload
            self._end, self._pop = lib.nvtx_host_range_end, lib.nvtx_host_range_pop

    def __repr__(self) -> str:
        state = "active" if self.nvtx else ("TensorFlow's profiler only" if self.active else "inactive")
        return f"<nvtx_plugins_tf host domain {self.name!r} {state}, {len(self._strings)} cached strings>"

    # -------------------------------------------------------------- strings, categories
    @property
    def cached_strings(self) -> int:
        """How many texts this domain's cache holds (<= :attr:`max_strings`)."""
        return len(self._strings)

    def _event(self, message: str, color: int, category: int, registered: bool = False):
        """The event buffer of (message, color, category): builds the event on a miss
        (registering ``message`` first when ``registered``), dropping the oldest text beyond
        :attr:`max_strings`."""
        if (
            type(color) is not int  # noqa: E721 - bool is not a color
            or type(category) is not int  # noqa: E721
            or not (0 <= color <= _UINT32_MAX and 0 <= category <= _UINT32_MAX)
        ):
            raise ValueError(f"NVTX color and category must be ints in [0, 0xFFFFFFFF], got {color!r}, {category!r}")
        key = (color << 32) | category
        entry = self._strings.get((message,) if registered else message)
        if entry is not None:
            event = entry.get(key)
            if event is None:
                event = _EventBuffer()
                event.text = entry.raw
                _lib.nvtx_host_event_init(event, self._handle, entry.handle, entry.raw, color, category)
                if len(entry) >= _MAX_EVENTS_PER_MESSAGE:
                    entry.clear()
                entry[key] = event
            return event
        if message.__class__ is not str:
            raise TypeError(f"NVTX message must be a str, got {type(message).__name__}")
        raw = message.encode()
        if b"\0" in raw:
            raise ValueError("NVTX messages must not contain NUL characters")
        event = _EventBuffer()
        entry = _Message()
        if registered:
            handle = _lib.nvtx_host_register_string(self._handle, raw)
            _lib.nvtx_host_event_init(event, self._handle, handle, raw, color, category)
        else:
            handle = _lib.nvtx_host_event_new(event, self._handle, raw, color, category)
        entry.handle = handle
        entry.raw = None if handle else raw
        event.text = entry.raw  # an unregistered event points at the bytes: they live as long as it
        entry[key] = event
        with self._miss_lock:
            strings = self._strings
            strings[(message,) if registered else message] = entry
            while len(strings) > self.max_strings:
                strings.popitem(last=False)
        return event

    def category(self, name: str) -> int:
        """The id of the category ``name`` in this domain: 1, 2 ... in order of first use,
        named once with ``nvtxDomainNameCategoryA``. 0 (no category) without an NVTX tool."""
        if not self.nvtx:
            return 0
        found = self._categories.get(name)
        if found is not None:
            return found
        if not isinstance(name, str) or "\0" in name:
            raise ValueError(f"NVTX category names must be str without NUL characters, got {name!r}")
        with self._miss_lock:
            found = self._categories.get(name)
            if found is None:
                found = self._categories[name] = len(self._categories) + 1
                _lib.nvtx_host_name_category(self._handle, found, name.encode())
        return found

    # -------------------------------------------------------------- events
    def start(self, message: str, color: int = 0, category: int = 0, payload: int | None = None) -> int | TracedRange:
        """Start a range (``nvtxDomainRangeStartEx``); returns what :meth:`end` takes, which
        any thread may call: the NVTX range id, or a :class:`TracedRange` while TensorFlow's
        profiler traces. ``color``: ARGB int (see :func:`color`), 0 for none; ``category``:
        an id from :meth:`category`, 0 for none; ``payload``: int64 or None."""
        if not self.active:
            return 0
        range_id = 0
        if self.nvtx:
            entry = self._strings.get(message)
            event = None if entry is None else entry.get((color << 32) | category)
            if event is None:
                event = self._event(message, color, category)
            range_id = self._start(event) if payload is None else self._start_payload(event, payload)
        trace_me = self._trace_me
        if trace_me is not None and trace_me.traceme_enabled():
            return TracedRange(range_id, trace_me.TraceMe(message, **_trace_me_kwargs(self.name, payload)))
        return range_id

    def start_registered(
        self, message: str, color: int = 0, category: int = 0, payload: int | None = None
    ) -> int | TracedRange:
        """Start a range as :meth:`start` does, its message an NVTX registered string
        (``nvtxDomainRegisterStringA``, once per text while the text stays in this domain's
        cache). For a range that a tool matches by name: nsys's ``--capture-range=nvtx``
        matches only registered strings by default (``NSYS_NVTX_PROFILER_REGISTER_ONLY=1``).
        Also a TraceMe activity while TensorFlow's profiler traces; :meth:`end` ends it.

        >>> from nvtx_plugins_tf import _host_ranges
        >>> from nvtx_plugins_tf.testing import capture
        >>> d = _host_ranges.domain("Example")
        >>> with capture() as rec:
        ...     d.end(d.start_registered("profile", _host_ranges.color("green")))
        >>> [(r.message, r.kind) for r in rec.find(domain="Example")]
        [('profile', 'start-end')]
        """
        if not self.active:
            return 0
        range_id = 0
        if self.nvtx:
            event = self._event(message, color, category, registered=True)
            range_id = self._start(event) if payload is None else self._start_payload(event, payload)
        trace_me = self._trace_me
        if trace_me is not None and trace_me.traceme_enabled():
            return TracedRange(range_id, trace_me.TraceMe(message, **_trace_me_kwargs(self.name, payload)))
        return range_id

    def end(self, range_id: int | TracedRange) -> None:
        """End a range started by :meth:`start` (``nvtxDomainRangeEnd``)."""
        if range_id.__class__ is TracedRange:
            range_id.trace_me.Stop()
            range_id = range_id.nvtx_id
        if self.nvtx:
            self._end(self._handle, range_id)

    def push(self, message: str, color: int = 0, category: int = 0, payload: int | None = None) -> int:
        """Push a range on this thread's stack (``nvtxDomainRangePushEx``); NVTX's result."""
        if not self.nvtx:
            return 0
        event = self._event(message, color, category)
        return self._push(event) if payload is None else self._push_payload(event, payload)

    def pop(self) -> int:
        """Pop this thread's innermost pushed range (``nvtxDomainRangePop``)."""
        return self._pop(self._handle) if self.nvtx else 0

    def mark(self, message: str, color: int = 0, category: int = 0, payload: int | None = None) -> None:
        """An instantaneous event (``nvtxDomainMarkEx``); a zero-length TraceMe activity
        while TensorFlow's profiler traces."""
        if self.nvtx:
            event = self._event(message, color, category)
            self._mark(event) if payload is None else self._mark_payload(event, payload)
        trace_me = self._trace_me
        if trace_me is not None and trace_me.traceme_enabled():
            trace_me.TraceMe(message, **_trace_me_kwargs(self.name, payload)).Stop()


_domains: dict[str | None, Domain] = {}


def domain(name: str | None = None) -> Domain:
    """The process-wide :class:`Domain` called ``name`` (``None``: the default domain).

    Active when ``NVTX_DISABLE`` is not set and a tool is attached or TensorFlow is loaded
    (checked when the domain is first asked for). Raises :class:`HostRangesUnavailable` (an ImportError with
    the command that fixes it) when a tool is attached but ``libnvtx_host.so`` cannot be
    loaded or built.
    """
    found = _domains.get(name)
    if found is not None:
        return found
    if name is not None and not isinstance(name, str):
        raise TypeError(f"domain name must be a str or None, got {type(name).__name__}")
    active = tool_attached()
    trace_me = _trace_me_api() if enabled() else None
    with _lock:
        found = _domains.get(name)
        if found is None:
            found = _domains[name] = Domain(name, active, trace_me=trace_me)
    return found

"""Export a recording as Trace Event Format JSON (Perfetto UI, chrome://tracing).

* push/pop ranges -> ``"ph": "X"`` complete events on their thread
  (a push/pop still open at the end -> ``"B"`` without ``"E"``),
* start/end ranges -> nestable async ``"b"``/``"e"`` pairs with the same ``cat`` (domain
  name or ``"nvtx"``) and the same process-local id ``"id2": {"local": "0x..."}`` (as
  Chrome writes them): Perfetto and catapult (chrome://tracing) scope such ids to the
  event's ``pid`` and show the range on an async track of its process (a global ``"id"``
  files it under "Global Legacy Events" in Perfetto). The ``e`` sits on the thread that
  ended it. speedscope imports only ``B``/``E``/``X`` events: it shows the push/pop
  ranges, not the start/end ranges nor the marks,
* marks -> ``"i"`` instant events (thread scope),
* ``"M"`` metadata events name processes and threads.

Timestamps are microseconds since the earliest segment's start (``otherData.origin_ns``
holds that CLOCK_MONOTONIC origin). ``args`` hold domain, category, color, payload.
The file is written batch by batch, never built in memory (:class:`JsonSink`, one of the
sinks :mod:`.one_pass` feeds from one decode).
"""

from __future__ import annotations

import ctypes
import json

import numpy as np

from ..recording._decoder import (
    FLAG_HAS_CATEGORY,
    FLAG_HAS_COLOR,
    FLAG_UNCLOSED,
    KIND_MARK,
    KIND_PUSH_POP,
    PAYLOAD_EXT,
    PAYLOAD_I32,
    PAYLOAD_I64,
    PAYLOAD_NONE,
    PAYLOAD_U32,
    PAYLOAD_U64,
    ROW_DTYPE,
    TextTable,
    library,
)
from ..recording.model import DamageReport, decode_payload
from ..recording.reader import RecordingReader, reading
from .one_pass import OutputFile, Sink, feed

__all__ = ["export_json", "JsonSink"]

_dumps = json.dumps
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _fmt_us(ns: int) -> str:
    if ns < 0:
        return "-" + _fmt_us(-ns)
    q, r = divmod(ns, 1000)
    return f"{q}.{r:03d}" if r else str(q)


def export_json(recording, output, *, reader: RecordingReader | None = None) -> DamageReport:
    """Write ``recording`` (dir or segment file) to ``output`` as Trace Event JSON.

    Returns the recording's :class:`DamageReport`. Pass an open ``reader`` to reuse it
    (it must not have been iterated yet).
    """
    with reading(recording, reader) as reader, JsonSink(reader, output) as sink:
        feed(reader, [sink])
        return sink.finish()


class _TextTable:
    """Texts by index, packed for ``nvtxr_json_lines`` (an ``NvtxrTextTable``); grows."""

    def __init__(self):
        self.texts: list[str] = []
        self._data = bytearray()
        self._offsets = [0]
        self._table = None
        self._keep = None

    def extend(self, texts) -> None:
        for t in texts:
            self.texts.append(t)
            self._data += t.encode("utf-8")
            self._offsets.append(len(self._data))
        self._table = None

    def table(self) -> TextTable:
        if self._table is None:
            data = bytes(self._data) or b"\0"
            offsets = np.asarray(self._offsets, dtype=np.uint64)
            self._keep = (data, offsets)  # alive as long as the table points at them
            self._table = TextTable(ctypes.cast(data, ctypes.c_void_p), offsets.ctypes.data, len(self.texts))
        return self._table


def _args_middle(dom, cat, flags, color, ptype, payload, categories, strings) -> str:
    """What follows ``"domain":...`` in a row's args: category, color, payload."""
    args = ""
    if flags & FLAG_HAS_CATEGORY:
        cname = categories.get((dom, cat))
        args += f',"category":{cat}'
        if cname is not None:
            args += ',"category_name":' + _dumps(cname, ensure_ascii=False)
    if flags & FLAG_HAS_COLOR:
        args += f',"color":"#{color & 0xFFFFFF:06x}"'
    if ptype == PAYLOAD_EXT:  # extended payloads: their decoded JSON
        args += ',"payload":' + strings[payload]
    elif ptype:
        value = decode_payload(ptype, payload)
        if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
            value = repr(value)
            args += f',"payload":"{value}"'
        else:
            args += f',"payload":{value!r}'
    return args


def _python_lines(rows, origin: int, jstr, jdom, categories, strings, async_id: int) -> tuple[list[str], int]:
    """The JSON lines of a batch (and the last async id), formatted in Python: what
    ``nvtxr_json_lines`` writes natively, kept as its reference and fallback."""
    start = (rows["start_ns"] - origin).tolist()
    end = (rows["end_ns"] - origin).tolist()
    parts = []
    append = parts.append
    for s, e, pid, tid, etid, payload, rid, msg, dom, cat, color, depth, flags, kind, ptype in zip(
        start,
        end,
        rows["pid"].tolist(),
        rows["tid"].tolist(),
        rows["end_tid"].tolist(),
        rows["payload"].tolist(),
        rows["range_id"].tolist(),
        rows["message"].tolist(),
        rows["domain"].tolist(),
        rows["category"].tolist(),
        rows["color"].tolist(),
        rows["depth"].tolist(),
        rows["flags"].tolist(),
        rows["kind"].tolist(),
        rows["payload_type"].tolist(),
    ):
        name = jstr[msg]
        dcat = jdom[dom]
        args = '"domain":' + dcat if dom else '"domain":""'
        args += _args_middle(dom, cat, flags, color, ptype, payload, categories, strings)
        if kind == KIND_PUSH_POP:
            args += f',"depth":{depth}'
            if flags & FLAG_UNCLOSED:
                append(
                    f'{{"name":{name},"cat":{dcat},"ph":"B","ts":{_fmt_us(s)},"pid":{pid},"tid":{tid},'
                    f'"args":{{{args},"unclosed":true}}}}'
                )
            else:
                append(
                    f'{{"name":{name},"cat":{dcat},"ph":"X","ts":{_fmt_us(s)},"dur":{_fmt_us(e - s)},'
                    f'"pid":{pid},"tid":{tid},"args":{{{args}}}}}'
                )
        elif kind == KIND_MARK:
            append(
                f'{{"name":{name},"cat":{dcat},"ph":"i","s":"t","ts":{_fmt_us(s)},"pid":{pid},'
                f'"tid":{tid},"args":{{{args}}}}}'
            )
        else:
            async_id += 1
            args += f',"range_id":{rid}'
            if flags & FLAG_UNCLOSED:
                append(
                    f'{{"name":{name},"cat":{dcat},"ph":"b","id2":{{"local":"{async_id:#x}"}},"ts":{_fmt_us(s)},'
                    f'"pid":{pid},"tid":{tid},"args":{{{args},"unclosed":true}}}}'
                )
            else:
                append(
                    f'{{"name":{name},"cat":{dcat},"ph":"b","id2":{{"local":"{async_id:#x}"}},"ts":{_fmt_us(s)},'
                    f'"pid":{pid},"tid":{tid},"args":{{{args},"end_tid":{etid}}}}}'
                )
                append(
                    f'{{"name":{name},"cat":{dcat},"ph":"e","id2":{{"local":"{async_id:#x}"}},"ts":{_fmt_us(e)},'
                    f'"pid":{pid},"tid":{etid}}}'
                )
    return parts, async_id


def _distinct(values) -> list[int]:
    """The distinct values of an int array (batches often hold one thread's rows only)."""
    if not len(values):
        return []
    if values.min() == values.max():
        return [int(values[0])]
    return np.unique(values).tolist()


#: Payload types whose value ``nvtxr_json_lines`` formats itself (the integers; none).
_NATIVE_PAYLOADS = np.array([PAYLOAD_NONE, PAYLOAD_U64, PAYLOAD_I64, PAYLOAD_U32, PAYLOAD_I32], dtype=np.uint8)
_BUFFER_BYTES = 16 << 20


class JsonSink(Sink):
    """:func:`export_json` batch by batch (see :mod:`.one_pass`); ``finish()`` returns the
    :class:`DamageReport`.

    Each batch's lines are formatted by ``nvtxr_json_lines`` (cc_ops/reader/json_lines.h)
    into a buffer written as it is; the strings are JSON-escaped once each, here. Rows with
    a category or a floating-point or extended payload get that part of their args from
    Python (:func:`_args_middle`). ``native=False`` formats everything in Python
    (:func:`_python_lines`: the same bytes, several times slower)."""

    def __init__(self, reader: RecordingReader, output, *, native: bool = True):
        self.reader = reader
        self.native = native
        self._file = OutputFile(output)
        try:
            self._out = open(self._file.tmp, "wb", buffering=1 << 20)
        except BaseException:
            self._file.discard()
            raise
        self._out.write(b'{"displayTimeUnit":"ns","traceEvents":[\n')
        self._first = True
        self._jstr = _TextTable()  # JSON-escaped strings by global string index
        self._jdom = _TextTable()  # JSON-escaped "cat" by global domain index
        self._threads: set[tuple[int, int]] = set()
        self._async_id = 0
        self._buffer: np.ndarray | None = None

    def add(self, rows) -> None:
        reader = self.reader
        jstr, jdom = self._jstr, self._jdom
        strings = reader.strings()
        if len(jstr.texts) < len(strings):
            jstr.extend(_dumps(s, ensure_ascii=False) for s in strings[len(jstr.texts) :])
        domains = reader.domain_names()
        if len(jdom.texts) < len(domains):
            jdom.extend(_dumps(d or "nvtx", ensure_ascii=False) for d in domains[len(jdom.texts) :])
        self._add_threads(rows)
        if not len(rows):
            return
        if self.native and _INT64_MIN <= reader.origin_ns <= _INT64_MAX:
            if self._native_lines(rows) is not None:
                return
        parts, self._async_id = _python_lines(
            rows, reader.origin_ns, jstr.texts, jdom.texts, reader.category_names(), strings, self._async_id
        )
        if parts:
            self._out.write((("" if self._first else ",\n") + ",\n".join(parts)).encode("utf-8"))
            self._first = False

    def _add_threads(self, rows) -> None:
        pids, tids, end_tids = rows["pid"], rows["tid"], rows["end_tid"]
        if len(pids) and pids.min() == pids.max():  # one process (usual): its distinct threads
            pid = int(pids[0])
            self._threads.update((pid, tid) for tid in _distinct(tids))
            self._threads.update((pid, tid) for tid in _distinct(end_tids[end_tids != tids]))
        else:
            pids = pids.tolist()
            self._threads.update(zip(pids, tids.tolist()))
            self._threads.update(zip(pids, end_tids.tolist()))

    def _native_lines(self, rows) -> int | None:
        """Writes the batch's lines through ``nvtxr_json_lines``; the rows written, or None
        when a row names a string or domain beyond the tables (left to the Python
        formatter, which raises as it always did)."""
        names, doms = self._jstr, self._jdom
        if int(rows["message"].max()) >= len(names.texts) or int(rows["domain"].max()) >= len(doms.texts):
            return None
        rows = np.ascontiguousarray(rows)
        extra_index, extras = self._extras(rows)
        if self._buffer is None:
            self._buffer = np.empty(_BUFFER_BYTES, dtype=np.uint8)
        async_id = ctypes.c_uint64(self._async_id)
        written = ctypes.c_uint64(0)
        args = (self.reader.origin_ns, names.table(), doms.table(), extras.table() if extras is not None else None)
        json_lines, out = library().nvtxr_json_lines, self._out
        done, n = 0, len(rows)
        while done < n:
            buf = self._buffer
            got = json_lines(
                rows.ctypes.data + done * ROW_DTYPE.itemsize,
                n - done,
                *args,
                None if extra_index is None else extra_index.ctypes.data + done * 8,
                ctypes.byref(async_id),
                buf.ctypes.data,
                len(buf),
                ctypes.byref(written),
            )
            if got < 0:  # the tables were checked above
                raise RuntimeError("nvtxr_json_lines: a row names a string beyond its table")
            if got == 0:  # one row larger than the buffer
                self._buffer = np.empty(2 * written.value, dtype=np.uint8)
                continue
            if not self._first:
                out.write(b",\n")
            out.write(buf[: written.value])
            self._first = False
            done += got
        self._async_id = async_id.value
        return n

    def _extras(self, rows):
        """The rows whose category / color / payload part of the args Python formats
        (:func:`_args_middle`): (index per row, -1 for none; their texts), or (None, None)."""
        need = (rows["flags"] & FLAG_HAS_CATEGORY) != 0
        need |= ~np.isin(rows["payload_type"], _NATIVE_PAYLOADS)
        where = np.flatnonzero(need)
        if not len(where):
            return None, None
        reader = self.reader
        categories, strings = reader.category_names(), reader.strings()
        sub = rows[where]
        extras = _TextTable()
        extras.extend(
            _args_middle(*fields, categories, strings)
            for fields in zip(
                sub["domain"].tolist(),
                sub["category"].tolist(),
                sub["flags"].tolist(),
                sub["color"].tolist(),
                sub["payload_type"].tolist(),
                sub["payload"].tolist(),
            )
        )
        index = np.full(len(rows), -1, dtype=np.int64)
        index[where] = np.arange(len(where), dtype=np.int64)
        return index, extras

    def _finish(self) -> DamageReport:
        reader, out, first = self.reader, self._out, self._first
        # Metadata: processes and threads.
        meta = []
        names = reader.thread_names
        for pid, info in sorted(reader.processes.items()):
            meta.append(
                {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": f"{info.name} ({pid})"}}
            )
            meta.append({"name": "process_labels", "ph": "M", "pid": pid, "tid": 0, "args": {"labels": info.cmdline}})
        for pid, tid in sorted(self._threads | set(names)):
            label = names.get((pid, tid)) or ("main" if tid == pid else f"thread {tid}")
            meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": label}})
        if meta:
            text = ("" if first else ",\n") + ",\n".join(_dumps(m, ensure_ascii=False) for m in meta)
            out.write(text.encode("utf-8"))
        damage = reader.damage()
        other = {
            "origin_ns": reader.origin_ns,
            "source": str(reader.path),
            "damaged_chunks": damage.damaged_chunks,
            "damaged_segments": damage.damaged_segments,
        }
        out.write(('\n],\n"otherData":' + _dumps(other) + "}\n").encode("utf-8"))
        out.close()
        self._file.commit()
        return damage

    def _abort(self) -> None:
        try:
            self._out.close()
        except OSError:
            pass
        self._file.discard()

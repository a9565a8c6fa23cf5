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

import json

from ..recording._decoder import FLAG_HAS_CATEGORY, FLAG_HAS_COLOR, FLAG_UNCLOSED, KIND_MARK, KIND_PUSH_POP, PAYLOAD_EXT
from ..recording.model import DamageReport, decode_payload
from ..recording.reader import RecordingReader, reading
from .one_pass import OutputFile, Sink, feed

__all__ = ["export_json", "JsonSink"]

_dumps = json.dumps


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


class JsonSink(Sink):
    """:func:`export_json` batch by batch (see :mod:`.one_pass`); ``finish()`` returns the
    :class:`DamageReport`."""

    def __init__(self, reader: RecordingReader, output):
        self.reader = reader
        self._file = OutputFile(output)
        try:
            self._out = open(self._file.tmp, "w", encoding="utf-8", buffering=1 << 20)
        except BaseException:
            self._file.discard()
            raise
        self._out.write('{"displayTimeUnit":"ns","traceEvents":[\n')
        self._first = True
        self._jstr: list[str] = []  # JSON-escaped strings by global string index
        self._jdom: list[str] = []
        self._threads: set[tuple[int, int]] = set()
        self._async_id = 0

    def add(self, rows) -> None:
        reader = self.reader
        origin = reader.origin_ns
        jstr, jdom, threads = self._jstr, self._jdom, self._threads
        async_id = self._async_id
        strings = reader.strings()
        if len(jstr) < len(strings):
            jstr.extend(_dumps(s, ensure_ascii=False) for s in strings[len(jstr) :])
        domains = reader.domain_names()
        if len(jdom) < len(domains):
            jdom.extend(_dumps(d or "nvtx", ensure_ascii=False) for d in domains[len(jdom) :])
        categories = reader.category_names()
        pids = rows["pid"]
        for pid, tid in set(zip(pids.tolist(), rows["tid"].tolist())) | set(
            zip(pids.tolist(), rows["end_tid"].tolist())
        ):
            threads.add((pid, tid))
        start = (rows["start_ns"] - origin).tolist()
        end = (rows["end_ns"] - origin).tolist()
        parts = []
        append = parts.append
        for s, e, pid, tid, etid, payload, rid, msg, dom, cat, color, depth, flags, kind, ptype in zip(
            start,
            end,
            pids.tolist(),
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
        self._async_id = async_id
        if parts:
            self._out.write(("" if self._first else ",\n") + ",\n".join(parts))
            self._first = False

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
            out.write(("" if first else ",\n") + ",\n".join(_dumps(m, ensure_ascii=False) for m in meta))
        damage = reader.damage()
        other = {
            "origin_ns": reader.origin_ns,
            "source": str(reader.path),
            "damaged_chunks": damage.damaged_chunks,
            "damaged_segments": damage.damaged_segments,
        }
        out.write('\n],\n"otherData":' + _dumps(other) + "}\n")
        out.close()
        self._file.commit()
        return damage

    def _abort(self) -> None:
        try:
            self._out.close()
        except OSError:
            pass
        self._file.discard()

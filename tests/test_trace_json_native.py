"""The JSON export's native formatter (cc_ops/reader/json_lines.h) writes the bytes its
Python reference (trace_json._python_lines) writes: hostile strings (quotes, backslashes,
control characters, non-ASCII, invalid UTF-8), every payload type and its extremes,
colors, categories, every kind of row, several processes, batches split across calls."""

from __future__ import annotations

import json
import struct

import pytest

from nvtx_plugins_tf.recorder.exports import trace_json
from nvtx_plugins_tf.recorder.exports.trace_json import JsonSink
from nvtx_plugins_tf.recorder.recording._synth import K_STRING, SegmentWriter, word0
from nvtx_plugins_tf.recorder.recording.reader import reading

NAMES = [
    'quote " and backslash \\ and slash /',
    "controls \x01\x07\b\t\n\f\r\x1b\x1f and DEL \x7f",
    "non-ASCII é ü 中文 🙂 \u2028 \u2029 \ufeff",
    "",
    "x" * 5000,  # longer than the small buffer below: the buffer grows
]
PAYLOADS = [
    ("u64", 2**64 - 1),
    ("u64", 0),
    ("i64", -(2**63)),
    ("i64", 2**63 - 1),
    ("u32", 2**32 - 1),
    ("i32", -(2**31)),
    ("double", 0.1),
    ("double", float("nan")),
    ("double", float("inf")),
    ("double", float("-inf")),
    ("double", -0.0),
    ("double", 1e300),
    ("float", 1.5),
    ("float", float("nan")),
    None,
]


def _recording(tmp_path):
    rec = tmp_path / "rec.nvtxrec"
    w = SegmentWriter(pid=700, start_ns=1_000_000, chunk_size=1 << 16, process_name='odd "name"\n')
    main, other = w.thread(700), w.thread(701)
    for i, text in enumerate(NAMES, start=1):
        main.string(i, text)
        other.string(i, text)
    bad = b"bad \xff\xfe utf-8"  # not UTF-8: read with U+FFFD
    main.record(word0(K_STRING, 0, 0, 20) + struct.pack("<II", len(bad), 0) + bad + b"\0" * (-len(bad) % 8))
    main.string(21, 'dom\\ain "x"').domain_create(1_000_001, 1, 21)
    main.string(22, "cat \t name").category_name(1, 3, 22)
    t = 1_000_100
    for k, payload in enumerate(PAYLOADS):
        msg = [1, 2, 3, 4, 5, 20, 0][k % 7]
        kw = {"payload": payload} if payload else {}
        if k % 3 == 0:
            kw["color"] = 0xFF00ABCD + k
        if k % 4 == 1:
            kw["category"] = 3 if k % 8 == 1 else 4  # 4: a category without a name
        domain = k % 2
        main.push(t, msg, domain=domain, **kw).push(t + 1, msg, **kw).pop(t + 1001).pop(t + 2 * k + 1500, domain=domain)
        other.start(t + 7, 2**64 - 1 - k, msg, domain=domain, **kw)
        main.end(t + 999_999, 2**64 - 1 - k, domain=domain)  # ended on another thread
        other.mark(t + 3, msg, domain=domain, **kw)
        t += 3_000
    main.push(t, 3, payload=("i32", -5)).start(t + 1, 42, 1, color=0xFFFFFFFF)  # never ended
    other.start(t + 2, 43, 2)
    w.thread(702).end(t + 9, 43)  # a thread that only ends a range
    w.write(rec)
    w2 = SegmentWriter(pid=800, start_ns=900_000, process_name="second")
    th = w2.thread(800)
    th.string(1, NAMES[0]).push(900_001, 1, payload=("u32", 7)).pop(900_500).mark(899_000, 1)  # before the origin
    w2.write(rec)
    return rec


def _export(rec, out, native: bool, batch: int) -> bytes:
    with reading(rec, None) as reader, JsonSink(reader, out, native=native) as sink:
        for rows in reader.batches(batch):
            sink.add(rows)
        sink.finish()
    return out.read_bytes()


@pytest.mark.parametrize("batch", [1, 7, 65536])
def test_native_and_python_formatters_write_the_same_bytes(tmp_path, monkeypatch, batch):
    monkeypatch.setattr(trace_json, "_BUFFER_BYTES", 1500)  # several calls per batch
    rec = _recording(tmp_path)
    native = _export(rec, tmp_path / "native.json", True, batch)
    python = _export(rec, tmp_path / "python.json", False, batch)
    assert native == python
    events = json.loads(native)["traceEvents"]
    names = {e["name"] for e in events if e["ph"] != "M"}
    assert set(NAMES) | {"bad \ufffd\ufffd utf-8"} <= names
    phases = [e["ph"] for e in events]
    assert {"X", "B", "b", "e", "i", "M"} <= set(phases)
    payloads = [e["args"].get("payload") for e in events if e["ph"] == "X"]
    assert {2**64 - 1, -(2**63), 2**32 - 1, -(2**31), 0.1, "nan", "inf", "-inf", 1.5} <= set(payloads)
    colors = {e["args"].get("color") for e in events if e["ph"] == "i"}
    assert "#00abcd" in colors
    assert any(e["args"].get("category_name") == "cat \t name" for e in events if e["ph"] == "X")
    assert any(e["ts"] < 0 for e in events if e["ph"] == "i")
    ids = [e["id2"]["local"] for e in events if e["ph"] == "b"]
    assert ids == [hex(i) for i in range(1, len(ids) + 1)]
    threads = {(e["pid"], e["tid"]) for e in events if e["name"] == "thread_name"}
    assert threads == {(700, 700), (700, 701), (700, 702), (800, 800)}


def _edge_rows(reader):
    """Rows the recorder does not write but a damaged or merged recording may give: ends
    before starts, times at the ends of int64, an unknown kind, the extremes of every
    numeric field. (No unknown payload type: the decoder drops such records.)"""
    import numpy as np

    from nvtx_plugins_tf.recorder.recording._decoder import ROW_DTYPE

    origin = reader.origin_ns
    big, small = 2**63 - 1, -(2**63)
    cases = [
        # start, end, kind, flags, payload_type, payload, depth, range_id
        (origin + 5_000, origin + 1_234, 1, 0, 0, 0, 0, 0),  # ends before it starts
        (origin - 7, origin - 1_000_001, 2, 0, 1, 2**64 - 1, -1, 2**64 - 1),
        (big, origin + small, 1, 1, 2, 2**63, 2**31 - 1, 0),  # durations beyond int64: no wrap
        (origin + small, big, 1, 1, 4, 2**64 - 1, -(2**31), 1),
        (small, big, 2, 1 | 4, 4, 2**64 - 1, -(2**31), 1),
        (origin, origin, 3, 0, 5, 0xFFFFFFFF_80000000, 0, 0),  # i32 from the low bytes
        (origin + 1, origin + 2, 9, 0, 0, 0, 0, 3),  # unknown kind: as start/end
        (origin + 999, origin + 1999, 1, 2, 3, 0x3FF0000000000000, 1, 0),  # category, double
    ]
    rows = np.zeros(len(cases), dtype=ROW_DTYPE)
    for row, (start, end, kind, flags, ptype, payload, depth, rid) in zip(rows, cases):
        row["start_ns"], row["end_ns"], row["kind"], row["flags"] = start, end, kind, flags
        row["payload_type"], row["payload"], row["depth"], row["range_id"] = ptype, payload, depth, rid
        row["pid"], row["tid"], row["end_tid"] = big, small, -1
        row["message"], row["domain"], row["color"], row["category"] = 1, 1, 0xFFFFFFFF, 2**32 - 1
    return rows


def test_native_and_python_formatters_agree_on_rows_at_the_limits(tmp_path):
    rec = _recording(tmp_path)
    outputs = []
    for native in (True, False):
        out = tmp_path / f"{native}.json"
        with reading(rec, None) as reader, JsonSink(reader, out, native=native) as sink:
            for rows in reader.batches():
                sink.add(rows)
            sink.add(_edge_rows(reader))
            sink.finish()
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]
    events = json.loads(outputs[0])["traceEvents"]
    assert any(e.get("dur", 0) < 0 for e in events)
    assert any(e.get("args", {}).get("payload") == 2**64 - 1 for e in events)

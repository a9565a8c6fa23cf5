"""The NVTX payload extension: schemas registered and extended payloads recorded from a C
program through the real NVTX API (tests/native/payload_sample.c), their values through
load(), NVTX_EVENTS.jsonText and the JSON args; an unknown schema, a malformed one, a
wild string pointer and a payload above the recorder's 4 KiB cap kept as raw bytes with
no damage; the recorded bytes checked against the format by an independent walker."""

from __future__ import annotations

import base64
import json
import sqlite3
import struct
import sys
from pathlib import Path

import pytest

from nvtx_plugins_tf.recorder import load
from nvtx_plugins_tf.recorder.recording.packed import unpack_segment

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
import nsys_oracle  # noqa: E402

INNER = {"x": 7, "y": -0.5}
OUTER = {
    "i32": -42,
    "u64": 18446744073709551615,
    "i8": -7,
    "f": 1.5,
    "d": 2.25,
    "fixed": 'fixed"str',
    "text": "pointed \\ text",
    "inner": INNER,
    "arr": [1, 2, 65535],
    "color": "green",
}
BIG = bytes(i & 0xFF for i in range(10000))
CAP = 4096  # record_format.h kMaxExtPayloadBytes: payload block of one event
EXPECTED = {
    "push outer": OUTER,
    "start inner": INNER,
    "mark two": [OUTER, INNER],
    "mark unknown": {"schemaId": (1 << 24) + 99, "size": 8, "raw": base64.b64encode(bytes(range(1, 9))).decode()},
    "mark bad": {"mystery": None, "far": None, "_raw": base64.b64encode(struct.pack("<i", 5)).decode()},
    "mark wild pointer": {**OUTER, "text": None},
    "thread mark": OUTER,
}


def check_large(value: dict) -> None:
    assert value["schemaId"] == 1023 and value["size"] == len(BIG) and value["truncated"] is True
    raw = base64.b64decode(value["raw"])
    assert 0 < len(raw) <= CAP - 24 and raw == BIG[: len(raw)]


@pytest.fixture(scope="module")
def sample(c_sample) -> Path:
    return c_sample("payload_sample")


@pytest.fixture(scope="module")
def recorded(sample, tmp_path_factory) -> Path:
    prefix = tmp_path_factory.mktemp("payload") / "rec"
    nsys_oracle.run_ours([sample], prefix)
    return prefix


def _raw_segment(recorded: Path) -> Path:
    """The recording's one segment in raw form (`record` packed it)."""
    folder = recorded.with_name("rec.nvtxrec")
    for packed in folder.glob("*.nvtxsegz"):
        unpack_segment(packed)
    (seg,) = folder.glob("*.nvtxseg")
    return seg


def test_values_round_trip_through_load(recorded):
    rec = load(recorded.with_name("rec.nvtxrec"))
    by_name = {r.message: r for r in rec.events}
    for name, expected in EXPECTED.items():
        assert by_name[name].payload_type == "json", name
        assert by_name[name].payload == expected, name
        assert by_name[name].domain == "payloads"
    check_large(by_name["mark large"].payload)
    assert by_name["push outer"].kind == "push-pop" and by_name["push outer"].end_ns is not None
    assert by_name["start inner"].kind == "start-end" and by_name["start inner"].end_ns is not None
    assert by_name["plain mark"].payload is None and by_name["plain mark"].payload_type is None
    d = rec.damage
    assert (d.damaged_chunks, d.dropped_events, d.unknown_strings, d.damaged_segments) == (0, 0, 0, 0)
    # push+pop, start+end, 7 marks; nvtxRangePushPayload+Pop and nvtxMarkPayload (no message)
    assert d.events == 14 and len(rec.events) == 11
    unnamed = sorted((r.kind, r.message, json.dumps(r.payload)) for r in rec.events if not r.message)
    assert unnamed == [("mark", "", json.dumps(OUTER)), ("push-pop", "", json.dumps(INNER))]
    assert by_name["thread mark"].tid != by_name["push outer"].tid


def test_sqlite_json_text(recorded):
    con = sqlite3.connect(recorded.with_name("rec.sqlite"))
    rows = con.execute("SELECT text, jsonText, uint64Value FROM NVTX_EVENTS WHERE eventType IN (34, 59, 60)").fetchall()
    got = {text: json_text for text, json_text, _ in rows}
    for name, expected in EXPECTED.items():
        assert json.loads(got[name]) == expected, name
    check_large(json.loads(got["mark large"]))
    assert got["plain mark"] is None
    assert all(u is None for *_, u in rows)


def test_perfetto_json_args(recorded):
    trace = json.loads(recorded.with_name("rec.json").read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    args = {e["name"]: e.get("args", {}) for e in events if e.get("ph") in ("B", "X", "i", "I", "b")}
    for name, expected in EXPECTED.items():
        assert args[name]["payload"] == expected, name
    check_large(args["mark large"]["payload"])
    assert "payload" not in args["plain mark"]


def walk_records(seg: bytes, offsets: list | None = None):
    """(kind, flags, domain, body) of every record of every chunk, from the format alone
    (``offsets`` receives the file offset of each body)."""
    chunk_size = struct.unpack_from("<I", seg, 16)[0]
    for base in range(4096, len(seg), chunk_size):
        if struct.unpack_from("<I", seg, base)[0] != 0x4B4E4843:
            continue
        pos, end = base + 64, base + chunk_size
        while pos + 8 <= end:
            w0 = struct.unpack_from("<Q", seg, pos)[0]
            kind, flags, domain = w0 & 0xFF, (w0 >> 8) & 0xFF, (w0 >> 16) & 0xFFFF
            if kind == 0:
                break
            if 1 <= kind <= 5:
                n = 16 + (8 if kind in (3, 4) else 0) + (8 if flags & 3 else 0) + (8 if flags >> 4 else 0)
                if flags >> 4 == 7:
                    block = struct.unpack_from("<Q", seg, pos + n - 8)[0]
                    if offsets is not None:
                        offsets.append((pos + n, block))
                    yield kind, flags, domain, seg[pos + n : pos + n + block]
                    n += (block + 7) & ~7
            elif 9 <= kind <= 13:  # a compact event (format 2): one word, + the range id of start/end
                n = 16 if kind in (11, 12) else 8
            elif kind in (16, 21):
                length = struct.unpack_from("<I", seg, pos + 8)[0]
                if offsets is not None and kind == 21:
                    offsets.append((pos + 16, length))
                yield kind, flags, domain, seg[pos + 16 : pos + 16 + length]
                n = 16 + ((length + 7) & ~7)
            elif kind in (17, 18, 19, 20):
                n = 16
            else:
                raise AssertionError(f"unknown record kind {kind}")
            pos += n


def test_recorded_bytes_follow_the_format(recorded):
    seg = _raw_segment(recorded)
    records = list(walk_records(seg.read_bytes()))
    schemas = {}
    for kind, _, _, body in records:
        if kind == 21:
            sid, stype, _, size, num, name_len = struct.unpack_from("<QQQQII", body)
            name = body[48 : 48 + name_len].decode()
            pos = 48 + ((name_len + 7) & ~7)
            entries = []
            for _ in range(num):
                flags, etype, detail, offset, esize, elen = struct.unpack_from("<QQQQQI", body, pos)
                pos += 48
                entries.append((body[pos : pos + elen].decode(), etype, offset, esize))
                pos += (elen + 7) & ~7
            schemas[name] = (sid, stype, size, entries)
    assert set(schemas) == {"Color", "Inner", "Outer", "Bad"}
    assert schemas["Inner"] == ((1 << 24) + 1, 1, 16, [("x", 15, 0, 4), ("y", 20, 8, 8)])
    outer = dict((n, (off, size)) for n, _, off, size in schemas["Outer"][3])
    # offsetof/sizeof as the C compiler lays Outer out (payload_sample.c).
    assert outer == {
        "i32": (0, 4),
        "u64": (8, 8),
        "i8": (16, 1),
        "f": (20, 4),
        "d": (24, 8),
        "fixed": (32, 12),
        "text": (48, 8),
        "inner": (56, 16),
        "arr": (72, 6),
        "color": (80, 4),
    }
    assert schemas["Outer"][0] >= 1 << 32  # a tool-assigned (dynamic) id
    assert schemas["Outer"][2] == 88
    blocks = [body for kind, flags, _, body in records if kind in (1, 3, 5) and flags >> 4 == 7]
    assert len(blocks) == 10
    assert max(len(b) for b in blocks) <= CAP
    # the large payload: header kept, bytes the caller passed, cut at the cap
    large = [b for b in blocks if struct.unpack_from("<Q", b)[0] == 1023]
    (b,) = large
    key, size, stored, kind, index = struct.unpack_from("<QQIHH", b)
    assert (size, kind, index) == (len(BIG), 1, 0) and stored == CAP - 24 and b[24 : 24 + stored] == BIG[:stored]


def test_nsys_does_not_record_extended_payloads(sample, tmp_path):
    """nsys 2022.4 predates the payload extension (NVTX 3.1): it records the events but no
    jsonText, so values are tested against the schema's own (above)."""
    nsys = nsys_oracle.nsys_or_skip()
    run = nsys_oracle.run_nsys(nsys, [sample], tmp_path / "theirs")
    con = sqlite3.connect(run.sqlite)
    rows = con.execute("SELECT text, jsonText FROM NVTX_EVENTS WHERE eventType IN (34, 59, 60)").fetchall()
    names = {t for t, _ in rows}
    assert {"push outer", "start inner", "mark two", "plain mark"} <= names
    assert all(j is None for _, j in rows)


def test_damaged_schemas_and_blocks_never_crash_the_reader(recorded, tmp_path):
    """Every byte of every schema definition and payload block changed, one at a time:
    the reader decodes the same events (the records keep their lengths) and every payload
    is still JSON; nothing is read outside the recorded bytes (no crash). A change inside a
    sealed chunk is reported by its seal (issue 21.4) and by nothing else."""
    from nvtx_plugins_tf.recorder.recording import reader as reader_mod  # noqa: F401  (the native reader)

    seg = _raw_segment(recorded)
    data = seg.read_bytes()
    spans: list = []
    list(walk_records(data, spans))
    assert len(spans) == 4 + 10
    # all but the large payload's 4 KiB of raw bytes (its header included)
    positions = sorted(
        {p for start, length in spans for p in range(start, start + min(length, 64))}
        | {p for start, length in spans if length < 1024 for p in range(start, start + length)}
    )
    assert len(positions) > 1000
    out = tmp_path / "d.nvtxrec"
    out.mkdir()
    target = out / seg.name
    base = load(recorded.with_name("rec.nvtxrec"))
    for i, pos in enumerate(positions):
        mutated = bytearray(data)
        mutated[pos] ^= 0xFF if i % 2 else 0x80
        target.write_bytes(bytes(mutated))
        rec = load(out)
        assert len(rec.events) == len(base.events), pos
        assert rec.damage.damaged_chunks == rec.damage.checksum_mismatches <= 1, pos
        for r in rec.events:
            if r.payload_type == "json":
                assert isinstance(r.payload, (dict, list)), pos

"""Crafted packed and raw segments read by the native reader and the Python copy path
(tests/test_recorder_review4.py runs this in a child and checks its peak memory): the pack
header's sizes and counts, each frame's lengths, and the raw header's sizes, at the format's
limits and past them. Prints one JSON line: a row per (case, path) and the peak RSS.

    python tests/packed_fuzz.py FOLDER
"""

from __future__ import annotations

import json
import os
import struct
import sys
import zlib
from pathlib import Path

import numpy as np

import nvtx_plugins_tf.recorder.recording.reader as rd
from nvtx_plugins_tf.recorder.recording._synth import SegmentWriter
from nvtx_plugins_tf.recorder.recording.packed import pack_segment

_HEAD = struct.Struct("<8sIIQIIQ24x")
_FRAME = struct.Struct("<IIII")
U32, U64 = 2**32 - 1, 2**64 - 1


def _base(folder: Path) -> tuple[bytes, bytes, int]:
    """A small segment (a few 4 KiB chunks of two threads), raw and packed, and its ranges."""
    seg = SegmentWriter(pid=5, start_ns=1000, chunk_size=4096)
    threads = [seg.thread(5), seg.thread(6)]
    threads[0].string(1, "work")
    now = 1000
    for _ in range(600):
        for t in threads:
            now += 3
            t.push(now, 1)
            t.pop(now + 1)
    raw_path = seg.write(folder / "base")
    raw = raw_path.read_bytes()
    packed = pack_segment(raw_path, keep_raw=True).read_bytes()
    return raw, packed, 1200


def _frames(packed: bytes) -> list[tuple[int, int, int]]:
    """(offset of its FrameHeader, packed_len, raw_len) of each frame."""
    out, pos = [], _HEAD.size
    while pos + _FRAME.size <= len(packed):
        plen, rlen, _, _ = _FRAME.unpack_from(packed, pos)
        out.append((pos, plen, rlen))
        pos += _FRAME.size + plen
    return out


def _with_head(packed: bytes, **fields) -> bytes:
    magic, version, codec, raw_size, header_size, chunk_size, frames = _HEAD.unpack_from(packed)
    values = dict(raw_size=raw_size, header_size=header_size, chunk_size=chunk_size, frames=frames) | fields
    head = _HEAD.pack(magic, version, codec, values["raw_size"], values["header_size"], values["chunk_size"],
                      values["frames"])  # fmt: skip
    return head + packed[_HEAD.size :]


def _with_frame(packed: bytes, at: int, packed_len=None, raw_len=None, data=None) -> bytes:
    plen, rlen, crc, zero = _FRAME.unpack_from(packed, at)
    body = packed[at + _FRAME.size : at + _FRAME.size + plen]
    if data is not None:
        body, crc = data, zlib.crc32(data)
    frame = _FRAME.pack(plen if packed_len is None else packed_len, rlen if raw_len is None else raw_len, crc, zero)
    return packed[:at] + frame + body + packed[at + _FRAME.size + plen :]


def _content_size_claims(body: bytes, size: int) -> bytes:
    """The Zstandard frame ``body`` with its header declaring ``size`` raw bytes (an 8-byte
    content size, single segment): a lie its blocks do not back."""
    assert int.from_bytes(body[:4], "little") == 0xFD2FB528
    fhd = body[4]
    fcs = (1 if (fhd >> 5) & 1 else 0, 2, 4, 8)[fhd >> 6]
    skip = 5 + (0 if (fhd >> 5) & 1 else 1) + (0, 1, 2, 4)[fhd & 3] + fcs
    return body[:4] + bytes([0xE0]) + size.to_bytes(8, "little") + body[skip:]


def packed_cases(packed: bytes) -> dict[str, bytes]:
    frames = _frames(packed)
    real_raw = _HEAD.unpack_from(packed)[3]
    cases: dict[str, bytes] = {"intact": packed}
    for raw_size in (0, 1, real_raw - 1, real_raw + 1, 1 << 40, U64):
        cases[f"raw_size={raw_size}"] = _with_head(packed, raw_size=raw_size)
    for header_size in (0, 23, 24, 4095, 4097, 1 << 20, (1 << 20) + 8, U32):
        cases[f"header_size={header_size}"] = _with_head(packed, header_size=header_size)
    for chunk_size in (0, 8, 4095, 8192, 1 << 30, (1 << 30) + 4096, U32 - 4095, U32):
        cases[f"chunk_size={chunk_size}"] = _with_head(packed, chunk_size=chunk_size)
        cases[f"chunk_size={chunk_size},raw_size=max"] = _with_head(packed, chunk_size=chunk_size, raw_size=U64)
    for n in (0, 1, len(frames) - 1, len(frames) + 1, 1 << 32, U64):
        cases[f"frames={n}"] = _with_head(packed, frames=n)
        cases[f"frames={n},raw_size=max"] = _with_head(packed, frames=n, raw_size=U64)
    for name, (at, plen, rlen) in (("header", frames[0]), ("chunk 0", frames[1]), ("last", frames[-1])):
        for packed_len in (0, plen - 1, plen + 1, U32):
            cases[f"{name}: packed_len={packed_len}"] = _with_frame(packed, at, packed_len=packed_len)
        for raw_len in (0, rlen - 1, rlen + 1, 1 << 20, 1 << 30, U32):
            cases[f"{name}: raw_len={raw_len}"] = _with_frame(packed, at, raw_len=raw_len)
        body = packed[at + _FRAME.size : at + _FRAME.size + plen]
        for size in (1 << 30, U32):
            lie = _content_size_claims(body, size)
            one = _with_frame(packed, at, packed_len=len(lie), raw_len=size & U32, data=lie)
            cases[f"{name}: content size {size}"] = one
            cases[f"{name}: content size {size}, chunks of 1 GiB"] = _with_head(one, chunk_size=1 << 30, raw_size=U64)
    # the chunks' frames all declaring 1 GiB, in a segment of 1 GiB chunks
    many = _with_head(packed, chunk_size=1 << 30, raw_size=U64)
    for at, _, _ in _frames(many)[1:]:
        many = _with_frame(many, at, raw_len=1 << 30)
    cases["every chunk: raw_len=1 GiB, chunks of 1 GiB"] = many
    return cases


def raw_cases(raw: bytes) -> dict[str, bytes]:
    cases: dict[str, bytes] = {"raw intact": raw}
    for off, fmt, values in (
        (12, "<I", (0, 8, 1 << 20, (1 << 20) + 8, U32)),  # header_size
        (16, "<I", (0, 4096, 1 << 30, (1 << 30) + 8, U32)),  # chunk_size
    ):
        for v in values:
            cases[f"raw {off}={v}"] = raw[:off] + struct.pack(fmt, v) + raw[off + 4 :]
    cases["raw sparse: 1 TiB of hole after it"] = raw
    return cases


def read(folder: Path, name: str, data: bytes, suffix: str, in_place: bool) -> dict:
    rec = folder / f"case{len(list(folder.iterdir()))}.nvtxrec"
    rec.mkdir()
    (rec / f"5-1000{suffix}").write_bytes(data)
    if name.startswith("raw sparse"):  # (a size of 1 TiB, a few KiB on disk)
        os.truncate(rec / f"5-1000{suffix}", 1 << 40)
    rd.UNPACK_IN_PLACE = in_place
    row = {"case": name, "path": "native" if in_place else "python"}
    try:
        with rd.RecordingReader(rec) as reader:
            rows = [b for b in reader.batches()]
            row["events"] = int(sum(len(b) for b in rows))
            damage = reader.damage()
            row["damage"] = damage.describe() if damage.damaged else ""
            row["rows"] = int(np.concatenate(rows)["start_ns"].sum()) if rows and row["events"] else 0
    except Exception as exc:  # noqa: BLE001 - what the test reports
        row["exception"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return row


def main(folder: str) -> int:
    folder = Path(folder)
    raw, packed, _ = _base(folder)
    out = []
    for name, data in packed_cases(packed).items():
        for in_place in (True, False):
            out.append(read(folder, name, data, ".nvtxsegz", in_place))
    for name, data in raw_cases(raw).items():
        out.append(read(folder, name, data, ".nvtxseg", True))
    # (VmHWM: this process's own peak; ru_maxrss counts the forked parent's before exec)
    hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    peak = int(hwm.split()[1]) // 1024
    print(json.dumps({"rows": out, "peak_mib": peak}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

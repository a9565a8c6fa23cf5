"""nvtx-tf merge moves every record of a real recording: the native rewrite
(``nvtxr_rewrite_segment_header``, ``nvtxr_rewrite_chunk``) misses no record kind.

The recording is made by the recorder from real NVTX calls holding every record kind:
tests/native/nvtx_sample.c ``basic`` (push/pop, start/end across threads, marks, colors,
categories and their names, payloads, registered strings, domains created and destroyed,
thread names) and ``fork`` (a child: ppid, parent_pid, parent_process_start_ns), and
tests/native/payload_sample.c (payload schemas and extended payload blocks). It is merged
after a synthetic recording whose clock origin is earlier by SHIFT and that holds every one
of its pids, so each of its processes is shifted and renumbered. The independent decoder
(tests/native/segment_oracle.py) then reads both: record for record, only timestamps
(+SHIFT) and the main threads' tids (the new pid) differ.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from nvtx_plugins_tf.recorder import merge as merge_mod
from nvtx_plugins_tf.recorder.recording._synth import SegmentWriter
from nvtx_plugins_tf.recorder.recording.reader import load, segment_files

sys.path.insert(0, str(Path(__file__).resolve().parent / "native"))
import segment_oracle as oracle  # noqa: E402

#: Odd, and larger than any clock of the machine: a timestamp missed is never off by chance.
SHIFT = 3 * 86_400 * 10**9 + 123
#: record_format.h: offsetof(SegmentHeader, process_start_ns), parent_pid, parent_process_start_ns
_PROCESS_FIELDS = ("<QqQ", 1160)


@pytest.fixture(scope="module")
def every_kind(tmp_path_factory, c_sample, recorder_env) -> Path:
    recording = tmp_path_factory.mktemp("every_kind") / "all.nvtxrec"
    env = recorder_env(recording)
    for command in (
        [c_sample("nvtx_sample"), "basic"],
        [c_sample("nvtx_sample"), "fork"],
        [c_sample("payload_sample")],
    ):
        proc = subprocess.run(list(map(str, command)), env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
    return recording


def _anchor(directory: Path, pids: list[int], offset: int) -> None:
    """A recording on the clock ``offset`` (realtime - monotonic) with one process per pid."""
    for pid in pids:
        w = SegmentWriter(pid=pid, start_ns=1000, start_realtime_ns=1000 + offset, cmdline="anchor")
        w.thread(pid).string(1, "anchor").mark(2000, msg=1)
        w.write(directory)


def test_merge_shifts_every_record_kind(every_kind, tmp_path):
    raw = load(every_kind)
    assert not raw.damage.damaged
    originals = segment_files(every_kind)
    decoded = [oracle.decode_segment(p) for p in originals]
    kinds = {r.kind for seg in decoded for r in seg.records}
    assert kinds == {*oracle.EVENT_KINDS, oracle.K_STRING, oracle.K_PAYLOAD_SCHEMA, oracle.K_DOMAIN_CREATE,
                     oracle.K_DOMAIN_DESTROY, oracle.K_CATEGORY, oracle.K_THREAD}  # fmt: skip
    assert any(r.kind in oracle.EVENT_KINDS and isinstance(r.payload, bytes) for seg in decoded for r in seg.records)
    first = min(raw.processes.values(), key=lambda p: p.start_ns)
    pids = sorted({seg.pid for seg in decoded})
    assert len(pids) >= 3  # basic, fork's parent and child, payload_sample
    _anchor(tmp_path / "anchor.nvtxrec", pids, first.start_realtime_ns - first.start_ns - SHIFT)

    out = tmp_path / "merged.nvtxrec"
    manifest = merge_mod.merge([tmp_path / "anchor.nvtxrec", every_kind], out, labels=["anchor", "all"])
    source = manifest["sources"][1]
    assert source["shift_ns"] == SHIFT
    pid_map = {int(k): v for k, v in source["renumbered_pids"].items()}
    assert sorted(pid_map) == pids

    for path, seg, name in zip(originals, decoded, source["segments"]):  # (merge keeps their order)
        new = oracle.decode_segment(out / name)
        assert (new.pid, new.ppid, new.start_ns) == (
            pid_map[seg.pid],
            pid_map.get(seg.ppid, seg.ppid),
            seg.start_ns + SHIFT,
        )
        assert (new.process_name, new.cmdline) == (f"all:{seg.process_name}", f"all:{seg.pid} {seg.cmdline}")
        assert len(new.records) == len(seg.records)
        for before, after in zip(seg.records, new.records):
            main = before.tid == seg.pid
            assert after.tid == (pid_map[seg.pid] if main else before.tid)
            if before.kind == oracle.K_THREAD and before.extra == seg.pid:
                assert after.extra == pid_map[seg.pid]
            elif before.ts is not None:
                assert after.ts == before.ts + SHIFT, before
            after.tid, after.extra, after.ts = before.tid, before.extra, before.ts
            assert after == before  # nothing else moved: kinds, ids, payload blocks, schemas
        # process_start_ns and the parent's identity (a fork's child)
        fmt, offset = _PROCESS_FIELDS
        start, parent, parent_start = struct.unpack_from(fmt, path.read_bytes(), offset)
        m_start, m_parent, m_parent_start = struct.unpack_from(fmt, (out / new.path.name).read_bytes(), offset)
        assert (m_start, m_parent, m_parent_start) == (
            start + SHIFT,
            pid_map.get(parent, parent),
            parent_start + SHIFT if parent_start else 0,
        )
    assert any(struct.unpack_from("<q", p.read_bytes(), 1168)[0] for p in originals)  # a child was recorded

    merged = load(out)
    assert not merged.damage.damaged
    assert merged.damage.events == raw.damage.events + len(pids)  # the anchor's marks
    moved = sorted(
        (pid_map[r.pid], r.tid if r.tid != r.pid else pid_map[r.pid], r.message, r.start_ns + SHIFT,
         None if r.end_ns is None else r.end_ns + SHIFT, json.dumps(r.payload))
        for r in raw.events
    )  # fmt: skip
    got = sorted(
        (r.pid, r.tid, r.message, r.start_ns, r.end_ns, json.dumps(r.payload))
        for r in merged.events
        if r.message != "anchor"
    )
    assert got == moved


def test_rewrite_chunk_stops_at_damage_and_names_bad_arguments():
    """A chunk ending at damage is rewritten up to it and kept as it is from there (the reader
    reports it); an unpublished one is left alone; bad arguments are named."""
    from nvtx_plugins_tf.recorder.recording import _decoder, _synth

    good = _synth.chunk_header(0, 5, 0) + _synth.event(_synth.K_MARK, 100)
    damaged = _synth.word0(99) + struct.pack("<Q", 200)  # no record kind 99
    chunk = bytearray((good + damaged).ljust(4096, b"\0"))
    assert _decoder.rewrite_chunk(chunk, 7, 5, 6) == _decoder.CHUNK_DAMAGED
    assert struct.unpack_from("<qQQ", chunk, 8)[0] == 6 and struct.unpack_from("<Q", chunk, 72)[0] == 107
    assert chunk[len(good) :] == (damaged.ljust(4096 - len(good), b"\0"))
    unpublished = bytearray(4096)
    unpublished[72:80] = struct.pack("<Q", 100)
    assert _decoder.rewrite_chunk(unpublished, 7, 5, 6) == _decoder.CHUNK_UNPUBLISHED
    assert unpublished[72:80] == struct.pack("<Q", 100)
    with pytest.raises(TypeError, match="chunk must be a writable buffer"):
        _decoder.rewrite_chunk(bytes(chunk), 7, 5, 6)
    names = {"pid": 1, "ppid": 1, "parent_pid": 0, "process_name": b"p", "cmdline": b"c"}
    with pytest.raises(TypeError, match="header must be a writable buffer"):
        _decoder.rewrite_segment_header("header", 7, **names)
    with pytest.raises(ValueError, match="header does not hold a segment header"):
        _decoder.rewrite_segment_header(bytearray(4096), 7, **names)

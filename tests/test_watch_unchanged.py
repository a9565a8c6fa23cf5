"""``watch``'s "nothing new" check (nvtx_plugins_tf/recorder/watch/unchanged.py): a poll maps a
rank again only when its bytes or its writers' state changed, and the steps stay exactly one
read's.

A rank under ``nvtx-tf record`` writes steps, waits for a file, writes more: polls while it
waits map nothing; the bytes it writes next (new records in its live chunk, a chunk sealed, a
new chunk), its writer's end or SIGKILL are each seen at the next poll. On a copy of a live
segment: a byte changed in the live chunk, the file grown, a new segment, a segment packed are
changes; a sealed chunk is not read again (its bytes are final).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

RANK = """
import os, sys, time, nvtx
go = sys.argv[1]
def steps(first, n):
    for i in range(first, first + n):
        with nvtx.annotate(f"step {i}", domain="train"):
            for k in range(50):
                nvtx.push_range(f"layer{k % 5}", domain="train")
                nvtx.pop_range(domain="train")
steps(0, 20)
with nvtx.annotate("held", domain="train"):  # (a push before the wait, its pop after it)
    open(go + ".waiting", "w").close()
    while not os.path.exists(go):
        time.sleep(0.01)
steps(20, int(sys.argv[2]))
open(go + ".waiting2", "w").close()
while not os.path.exists(go + "2"):
    time.sleep(0.01)
"""


def _cli(*args) -> list[str]:
    return [sys.executable, "-m", "nvtx_plugins_tf", *map(str, args)]


def _wait_for(path: Path, proc) -> None:
    deadline = time.monotonic() + 120  # (a guard against a hang, not a figure)
    while not path.exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline
        time.sleep(0.01)


def _start(tmp_path, child_env, more: int):
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    folder = tmp_path / "job"
    folder.mkdir()
    go = tmp_path / "go"
    proc = subprocess.Popen(
        _cli("record", "-o", folder / "rank0", "--export", "json", "--", sys.executable, script, go, more),
        env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    _wait_for(Path(f"{go}.waiting"), proc)
    return folder, go, proc


def _steps(objects: list[dict]) -> dict:
    return {(o["rank"], o["step"]): o for o in objects if o["kind"] == "step"}


@pytest.mark.parametrize("more", [30, 3000])  # (3000 steps: chunks sealed and new ones between two polls)
def test_polls_with_nothing_new_map_nothing_and_the_steps_are_one_reads(tmp_path, child_env, more):
    from nvtx_plugins_tf.recorder.watch.session import Watch

    folder, go, proc = _start(tmp_path, child_env, more)
    live = Watch([str(folder)])
    polled = live.poll()
    (source,) = live.tailer.sources.values()
    assert source.maps == 1 and source.state == "live"
    assert len(_steps(polled)) == 20
    for _ in range(3):  # the rank waits inside "held": nothing new
        assert live.poll() == []
    assert source.maps == 1

    go.touch()  # the pop of "held" and MORE steps, then a second wait
    _wait_for(Path(f"{go}.waiting2"), proc)
    polled += live.poll()
    assert source.maps == 2
    assert len(_steps(polled)) == 20 + more
    assert live.poll() == [] and source.maps == 2

    Path(f"{go}2").touch()  # the writer ends: read once more (its state changed), then done
    assert proc.wait(timeout=300) == 0, proc.stderr.read()
    polled += live.poll()
    assert live.done and source.state == "ended"

    once = Watch([str(folder)])
    assert _steps(polled) == _steps(once.poll())  # every field


def test_a_sigkilled_writer_is_read_again_and_named_stale(tmp_path, child_env):
    from nvtx_plugins_tf.recorder.watch.session import Watch

    folder, go, proc = _start(tmp_path, child_env, 5)
    live = Watch([str(folder)])
    live.poll()
    (source,) = live.tailer.sources.values()
    assert live.poll() == [] and source.maps == 1
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    deadline = time.monotonic() + 60
    out = []
    while not live.done and time.monotonic() < deadline:
        out += live.poll()
        time.sleep(0.05)
    assert source.state == "lost" and source.maps == 2
    assert {"kind": "stale", "rank": "rank0"} in out


def test_what_the_fingerprint_sees(tmp_path, child_env):
    from nvtx_plugins_tf.recorder.recording.reader import segment_files
    from nvtx_plugins_tf.recorder.watch.unchanged import HEADER_BYTES, fingerprint

    folder, go, proc = _start(tmp_path, child_env, 3000)
    go.touch()
    _wait_for(Path(f"{go}.waiting2"), proc)
    (segment,) = segment_files(folder / "rank0.nvtxrec")
    copy = tmp_path / "copy"
    copy.mkdir()
    raw = copy / segment.name
    shutil.copyfile(segment, raw)
    Path(f"{go}2").touch()
    assert proc.wait(timeout=300) == 0, proc.stderr.read()

    first = fingerprint([raw])
    chunks = first.segments[raw.name].chunks
    sealed = [k for k, c in enumerate(chunks) if c and c[0] == "sealed"]
    live = [k for k, c in enumerate(chunks) if c and c[0] == "open"]
    assert sealed and live, chunks
    assert fingerprint([raw], first) == first
    header_size, chunk_size = 4096, int.from_bytes(raw.read_bytes()[16:20], "little")

    def poke(offset: int, value: bytes) -> None:
        with open(raw, "r+b") as f:
            f.seek(offset)
            f.write(value)

    def end_of_data(k: int) -> int:
        data = raw.read_bytes()[header_size + k * chunk_size : header_size + (k + 1) * chunk_size]
        return header_size + k * chunk_size + len(data.rstrip(b"\0"))

    # a record appended in the live chunk (past its end of data), or its first word published
    # over a body already there, or damage there: a change
    at = (end_of_data(live[0]) + 7) // 8 * 8
    poke(at + 8, b"\x01")
    second = fingerprint([raw], first)
    assert second != first
    poke(at, b"\x02")
    assert fingerprint([raw], second) != second
    # a sealed chunk's bytes are final: not read again (its damage is read after the writers end)
    poke(header_size + sealed[0] * chunk_size + 200, b"\xff")
    third = fingerprint([raw], fingerprint([raw], second))
    assert fingerprint([raw], third) == third
    # the header page (flags, chunk count, dropped events), a grown file, a new segment
    poke(HEADER_BYTES - 1, b"\x07")
    assert fingerprint([raw], third) != third
    fourth = fingerprint([raw])
    with open(raw, "ab") as f:
        f.write(b"\0" * chunk_size)
    assert fingerprint([raw], fourth) != fourth
    other = copy / ("1-" + raw.name.split("-", 1)[1])
    shutil.copyfile(raw, other)
    assert fingerprint([raw, other], fourth) != fourth
    # packed: raw replaced by a .nvtxsegz of another name
    packed = copy / (raw.name + "z")
    raw.rename(packed)
    assert fingerprint([packed], fourth) != fourth


def test_a_foreign_or_huge_file_is_read_each_poll_not_checked_chunk_by_chunk(tmp_path):
    from nvtx_plugins_tf.recorder.watch.unchanged import fingerprint

    foreign = tmp_path / "1-2.nvtxseg"
    foreign.write_bytes(b"not a segment" * 100)
    first = fingerprint([foreign])
    assert fingerprint([foreign], first) == first  # (its bytes: the reader names the damage once)
    huge = tmp_path / "3-4.nvtxseg"
    head = bytearray(4096)
    head[:8] = b"NVTXREC1"
    head[12:20] = (4096).to_bytes(4, "little") + (4096).to_bytes(4, "little")
    huge.write_bytes(bytes(head))
    with open(huge, "r+b") as f:
        f.truncate(4096 + 100_000 * 4096)  # (a sparse file of 100,000 empty chunks)
    one = fingerprint([huge])
    assert fingerprint([huge], one) != one  # (not checked: read)

"""End-to-end tests of the native NVTX recorder (cc_ops/recorder).

A C program using the NVTX v3 header API (tests/native/nvtx_sample.c) runs with
NVTX_INJECTION64_PATH pointing at libnvtx_recorder.so; the segments it writes are decoded
here by tests/native/segment_oracle.py, a small decoder written from
cc_ops/format/record_format.h alone, independent of the project's reader.
"""

from __future__ import annotations

import signal
import subprocess
import textwrap
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from native.segment_oracle import (
    F_CATEGORY,
    F_REGISTERED,
    K_CATEGORY,
    K_DOMAIN_CREATE,
    K_DOMAIN_DESTROY,
    K_END,
    K_MARK,
    K_POP,
    K_PUSH,
    K_START,
    Segment,
    decode_dir,
    scan_segment,
)

# ---- fixtures ---------------------------------------------------------------------------
# recorder_build (a fresh build of libnvtx_recorder.so), c_sample and recorder_env: conftest.py


@pytest.fixture(scope="module")
def sample(c_sample) -> Path:
    return c_sample("nvtx_sample")


@pytest.fixture(scope="module")
def recording_env(recorder_env, recorder_build):
    """``recording_env(record_dir, **variables)``: the recorder built here attached, recording into record_dir."""
    return lambda record_dir, **extra: recorder_env(record_dir, library=recorder_build, **extra)


def _run(exe, args, env, timeout=60) -> dict[str, str]:
    proc = subprocess.run([str(exe), *args], env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    out = {}
    for line in proc.stdout.splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            out[key] = value
    return out


# ---- tests ------------------------------------------------------------------------------


@dataclass
class BasicRun:
    """One run of ``nvtx_sample basic``: what it printed and its one segment, decoded."""

    out: dict[str, str]
    seg: Segment
    tid_main: int
    tid_thread: int

    @property
    def events(self):
        return self.seg.events

    @property
    def main(self):
        return [e for e in self.seg.events if e.tid == self.tid_main]

    @property
    def domain(self) -> int:
        return next(iter(self.seg.domains()))

    def one(self, text, kind=None):
        found = [e for e in self.events if e.text == text and (kind is None or e.kind == kind)]
        assert len(found) == 1, (text, found)
        return found[0]


@pytest.fixture(scope="module")
def basic(recording_env, sample, tmp_path_factory) -> BasicRun:
    record_dir = tmp_path_factory.mktemp("basic")
    out = _run(sample, ["basic"], recording_env(record_dir))
    [seg] = decode_dir(record_dir)
    return BasicRun(out, seg, int(out["tid_main"]), int(out["tid_thread"]))


def test_basic_levels_returned_to_the_program(basic):
    out = basic.out
    assert out["push_levels"] == "0,1" and out["pop_levels"] == "1,0"
    assert out["domain_levels"] == "0,0" and out["empty_pop"] == "-1"
    assert out["same_domain"] == "1"


def test_basic_segment_identity(basic):
    seg = basic.seg
    assert seg.path.name.startswith(f"{seg.pid}-") and seg.path.name.endswith(".nvtxseg")
    assert seg.process_name == "nvtx_sample"
    assert seg.cmdline.endswith("nvtx_sample basic")


def test_basic_event_counts_and_timestamps(basic):
    events = basic.events
    assert Counter(e.kind for e in events) == {K_MARK: 14, K_PUSH: 5, K_POP: 6, K_START: 4, K_END: 5}
    assert {e.tid for e in events} == {basic.tid_main, basic.tid_thread}
    assert all(e.ts >= basic.seg.start_ns for e in events)
    assert [e.ts for e in basic.main] == sorted(e.ts for e in basic.main)


def test_basic_thread_names(basic):
    # Thread names: comm at first chunk claim + the nvtxNameOsThread override.
    names = basic.seg.thread_names()
    assert (False, "nvtx_sample") in names[basic.tid_main]
    assert (True, "main-renamed") in names[basic.tid_main]
    assert (False, "nvtx_sample") in names[basic.tid_thread]


def test_basic_categories_and_domains(basic):
    seg = basic.seg
    cats = {(r.domain, r.extra): seg.strings[r.msg] for r in seg.records if r.kind == K_CATEGORY}
    domains = seg.domains()
    assert list(domains.values()) == ["my-domain"]  # created twice, defined once
    dom = next(iter(domains))
    assert dom != 0
    assert cats == {(0, 7): "cat-seven", (dom, 3): "dom-cat"}


def test_basic_push_pop_nesting(basic):
    # Push/pop nesting in program order.
    kinds = [(e.kind, e.text) for e in basic.main if e.kind in (K_PUSH, K_POP) and e.domain == 0][:4]
    assert kinds == [(K_PUSH, "push-outer"), (K_PUSH, "push-inner"), (K_POP, None), (K_POP, None)]


def test_basic_start_end_attributes_and_payload_types(basic):
    start = basic.one("start-ex", K_START)
    assert (start.color, start.category, start.payload) == (0xFF00FF00, 7, 42)
    assert start.range_id == int(basic.out["range_start_ex"]) != 0
    ends = [e for e in basic.events if e.kind == K_END and e.range_id == start.range_id]
    assert len(ends) == 1 and ends[0].tid == basic.tid_main

    assert basic.one("p-i64").payload == -5
    assert basic.one("p-dbl").payload == 2.5
    assert basic.one("p-u32").payload == 7
    assert basic.one("p-i32").payload == -7
    assert basic.one("p-flt").payload == 1.5
    assert all(basic.one(t).color is None and basic.one(t).category is None for t in ("p-i64", "p-flt"))


def test_basic_registered_string_in_domain(basic):
    seg, events, dom = basic.seg, basic.events, basic.domain
    dpush = [e for e in events if e.kind == K_PUSH and e.domain == dom]
    assert len(dpush) == 1
    assert dpush[0].flags & F_REGISTERED and dpush[0].text == "reg-msg" and dpush[0].color == 0xFFFF0000
    assert seg.string_domains[dpush[0].msg] == dom
    assert [e.kind for e in events if e.domain == dom] == [K_PUSH, K_POP, K_MARK, K_START, K_END]
    dmark = basic.one("dom-mark")
    assert dmark.domain == dom and dmark.category == 3
    assert sum(r.kind == K_DOMAIN_DESTROY and r.domain == dom for r in seg.records) == 1


def test_basic_unicode(basic):
    # UTF-32 wchar_t -> UTF-8.
    assert basic.one("wide-\u00fc\u20ac\U0001f600", K_PUSH).tid == basic.tid_main
    basic.one("mark-w", K_MARK)
    basic.one("start-w", K_START)


def test_basic_range_across_threads(basic):
    cross = basic.one("cross-thread", K_START)
    assert cross.tid == basic.tid_main and cross.range_id == int(basic.out["range_cross"])
    [cross_end] = [e for e in basic.events if e.kind == K_END and e.range_id == cross.range_id]
    assert cross_end.tid == basic.tid_thread
    assert basic.one("in-thread").tid == basic.tid_thread
    range_ids = [e.range_id for e in basic.events if e.kind == K_START]
    assert len(set(range_ids)) == len(range_ids) and 0 not in range_ids


def test_basic_broken_calls_recorded_without_their_broken_parts(basic):
    events = basic.events
    bare_marks = [e for e in events if e.kind == K_MARK and e.msg == 0 and e.flags == 0]
    assert len(bare_marks) == 3  # MarkA(NULL), MarkEx(NULL), size=3
    bad = basic.one("bad-types")
    assert bad.flags == 0 and bad.color is None and bad.payload is None
    [cat_only] = [e for e in events if e.kind == K_MARK and e.category == 5]
    assert cat_only.msg == 0 and cat_only.flags == F_CATEGORY  # messageType 99: no message
    assert [e for e in events if e.kind == K_END and e.range_id == 0xDEADBEEF][0].tid == basic.tid_main


def _product_reader(record_dir: Path):
    """The project's reader on a recording folder: (rows, damage report, its string table)."""
    import numpy as np

    from nvtx_plugins_tf.recorder.recording.reader import RecordingReader

    with RecordingReader(record_dir) as reader:
        batches = list(reader.batches())
        return np.concatenate(batches), reader.damage(), reader.strings()


_ROW_BEGIN = {1: K_PUSH, 2: K_START, 3: K_MARK}  # the reader's row kinds -> the event opening the row


def test_basic_product_reader_agrees_with_the_oracle(basic):
    """The project's reader on the recorder's segment: no damage, every event, one row per
    push, start and mark with its timestamp and message (the oracle's strict and lenient
    decoders agree on it too)."""
    scan = scan_segment(basic.seg.path.read_bytes())
    assert not scan.damaged
    key = lambda e: (e.kind, e.ts, e.msg)
    assert Counter(map(key, scan.events)) == Counter(map(key, basic.events))
    rows, damage, strings = _product_reader(basic.seg.path.parent)
    assert not damage.damaged and damage.events == len(basic.events) and damage.unclosed == 0
    got = Counter((_ROW_BEGIN[int(r["kind"])], int(r["start_ns"]), strings[r["message"]]) for r in rows)
    begins = [e for e in basic.events if e.kind in (K_PUSH, K_START, K_MARK)]
    assert got == Counter((e.kind, e.ts, e.text or "") for e in begins)


def test_threads_every_event_once(recording_env, sample, tmp_path):
    threads, n = 8, 100_000
    # Small chunks: many chunk claims racing between threads.
    _run(sample, ["stress", str(threads), str(n)], recording_env(tmp_path, NVTX_TF_CHUNK_SIZE="65536"))
    [seg] = decode_dir(tmp_path)
    assert seg.chunk_size == 65536
    per_tid: dict[int, Counter] = {}
    text_of_tid: dict[int, set] = {}
    for e in seg.events:
        per_tid.setdefault(e.tid, Counter())[e.kind] += 1
        if e.kind == K_PUSH:
            text_of_tid.setdefault(e.tid, set()).add(e.text)
    assert len(per_tid) == threads
    assert all(c == {K_PUSH: n, K_POP: n} for c in per_tid.values())
    assert sorted(t for texts in text_of_tid.values() for t in texts) == sorted(f"stress-{i}" for i in range(threads))
    assert all(len(texts) == 1 for texts in text_of_tid.values())
    # Strictly alternating push/pop per thread (program order across chunks).
    for tid in per_tid:
        kinds = [e.kind for e in seg.events if e.tid == tid]
        assert kinds[0::2] == [K_PUSH] * n and kinds[1::2] == [K_POP] * n


def test_sigkill_keeps_completed_ranges(recording_env, sample, tmp_path):
    n = 200_000
    env = recording_env(tmp_path, NVTX_TF_CHUNK_SIZE="16384")
    proc = subprocess.Popen([str(sample), "kill", str(n)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip() == f"ready {n}"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    [seg] = decode_dir(tmp_path)
    pushes = [e.payload for e in seg.events if e.kind == K_PUSH]
    assert pushes[:n] == list(range(n))  # every completed range, in order, once
    assert sum(e.kind == K_POP for e in seg.events) >= n
    assert all(e.text == "kill-range" for e in seg.events if e.kind == K_PUSH)
    # The project's reader keeps every event the oracle finds, damage exactly as the oracle.
    scan = scan_segment(seg.path.read_bytes())
    assert len(scan.events) == len(seg.events)
    _rows, damage, _strings = _product_reader(tmp_path)
    assert damage.events == len(scan.events) and damage.damaged == scan.damaged, (scan.damage, damage)


def test_fork_child_writes_own_segment(recording_env, sample, tmp_path):
    out = _run(sample, ["fork"], recording_env(tmp_path))
    assert out["child_status"] == "0"
    parent_pid = int(out["parent_pid"])
    segs = {s.pid: s for s in decode_dir(tmp_path)}
    assert len(segs) == 2 and parent_pid in segs
    parent = segs.pop(parent_pid)
    [child] = segs.values()
    assert child.ppid == parent_pid
    assert [e.text for e in parent.events] == ["parent-before", None, "parent-after"]
    assert [(e.kind, e.text) for e in child.events] == [
        (K_PUSH, "child-range"),
        (K_POP, None),
        (K_MARK, "child-domain-mark"),
    ]
    # The domain created before fork is defined in the child's segment too.
    mark = child.events[-1]
    assert child.domains()[mark.domain] == "fork-domain"
    assert {e.tid for e in child.events} == {child.pid}


def test_long_and_many_strings(recording_env, sample, tmp_path):
    _run(sample, ["strings"], recording_env(tmp_path, NVTX_TF_CHUNK_SIZE="8192"))
    [seg] = decode_dir(tmp_path)  # decoding checks UTF-8 validity and chunk bounds
    assert seg.chunk_size == 8192
    texts = [e.text for e in seg.events]
    assert len(texts) == 2 + 6000
    first, second = texts[0], texts[1]
    assert set(first) == {"\u00e9"} and 1000 < len(first.encode()) <= 8192 - 64 - 16
    assert second.startswith("xx\u00e9") and len(second.encode()) <= 8192 - 64 - 16
    assert texts[2:] == [f"msg-{i}" for i in range(3000)] * 2


def test_calls_after_thread_teardown_are_dropped(recording_env, sample, tmp_path):
    _run(sample, ["exit"], recording_env(tmp_path))
    [seg] = decode_dir(tmp_path)
    assert Counter(e.text for e in seg.events) == {"main-mark": 1, "thread-mark": 4, "main-end": 1}
    assert len({e.tid for e in seg.events}) == 5


def test_two_nvtx_instances_share_state(recording_env, sample, c_sample, tmp_path):
    lib = c_sample("nvtx_sample", "-shared", "-fPIC", "-DNVTX_SAMPLE_LIBRARY")
    rec = tmp_path / "rec"
    out = _run(sample, ["twolibs", str(lib)], recording_env(rec))
    assert out["attached"] == "2"
    [seg] = decode_dir(rec)
    creates = [r for r in seg.records if r.kind == K_DOMAIN_CREATE]
    assert [seg.strings[r.msg] for r in creates] == ["shared-domain"]
    dom = creates[0].domain
    assert [(e.kind, e.domain, e.text) for e in seg.events] == [
        (K_MARK, dom, "from-main"),
        (K_PUSH, dom, "from-lib"),
        (K_POP, dom, None),
    ]


def test_unusable_dir_disables_recorder(recording_env, sample, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    _run(sample, ["basic"], recording_env(blocker / "sub"))
    assert not list(tmp_path.rglob("*.nvtxseg"))


def test_python_nvtx_package(recording_env, recorder_build, venv_python, tmp_path):
    record_dir = tmp_path / "rec"
    script = textwrap.dedent(
        f"""
        import ctypes, nvtx
        with nvtx.annotate("x", domain="d", color="red"):
            pass
        nvtx.push_range("plain")
        nvtx.pop_range()
        lib = ctypes.CDLL({str(recorder_build)!r})
        lib.nvtx_recorder_event_count.restype = ctypes.c_uint64
        lib.nvtx_recorder_output_dir.restype = ctypes.c_char_p
        print("attached", lib.nvtx_recorder_attached())
        print("events", lib.nvtx_recorder_event_count())
        print("dir", lib.nvtx_recorder_output_dir().decode())
        """
    )
    proc = subprocess.run(
        [venv_python, "-c", script], env=recording_env(record_dir), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert int(lines["attached"]) >= 1
    assert int(lines["events"]) == 4
    assert lines["dir"] == str(record_dir.resolve())
    [seg] = decode_dir(record_dir)
    domains = seg.domains()
    push = [e for e in seg.events if e.kind == K_PUSH and e.text == "x"]
    assert len(push) == 1
    assert domains[push[0].domain] == "d"
    assert push[0].color is not None and (push[0].color & 0xFFFFFF) == 0xFF0000
    assert [e.text for e in seg.events if e.domain == 0 and e.kind == K_PUSH] == ["plain"]


def test_python_multiprocessing_children(recording_env, recorder_build, venv_python, tmp_path):
    """fork, spawn and forkserver children each write their own segment."""
    record_dir = tmp_path / "rec"
    script = textwrap.dedent(
        """
        import multiprocessing as mp, os, nvtx

        def child(method):
            nvtx.mark(f"child-{method}")

        if __name__ == "__main__":
            nvtx.mark("parent")
            for method in ("fork", "spawn", "forkserver"):
                p = mp.get_context(method).Process(target=child, args=(method,))
                p.start()
                p.join()
                assert p.exitcode == 0, method
            nvtx.mark("parent-end")
        """
    )
    path = tmp_path / "mp_script.py"
    path.write_text(script)
    proc = subprocess.run(
        [venv_python, str(path)], env=recording_env(record_dir), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    by_text = {}
    for seg in decode_dir(record_dir):
        for e in seg.events:
            by_text.setdefault(e.text, []).append(seg.pid)
    assert sorted(by_text) == ["child-fork", "child-forkserver", "child-spawn", "parent", "parent-end"]
    assert all(len(pids) == 1 for pids in by_text.values())
    assert by_text["parent"] == by_text["parent-end"]
    assert len({pids[0] for pids in by_text.values()}) == 4


def test_in_process_output_dir_switch(recording_env, recorder_build, venv_python, tmp_path):
    """nvtx_recorder_set_output_dir moves the next events into a new segment."""
    first, second = tmp_path / "first", tmp_path / "second"
    script = textwrap.dedent(
        f"""
        import ctypes, threading, nvtx
        nvtx.push_range("before"); nvtx.pop_range()
        lib = ctypes.CDLL({str(recorder_build)!r})
        lib.nvtx_recorder_set_output_dir.argtypes = [ctypes.c_char_p]
        assert lib.nvtx_recorder_set_output_dir({str(second)!r}.encode()) == 0
        nvtx.push_range("after"); nvtx.pop_range()
        t = threading.Thread(target=lambda: nvtx.mark("in-thread"))
        t.start(); t.join()
        assert lib.nvtx_recorder_set_output_dir(b"/proc/forbidden/x") == -1
        print("ok")
        """
    )
    proc = subprocess.run(
        [venv_python, "-c", script], env=recording_env(first), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    [a] = decode_dir(first)
    [b] = decode_dir(second)
    assert [e.text for e in a.events if e.kind == K_PUSH] == ["before"]
    assert [e.text for e in b.events if e.kind in (K_PUSH, K_MARK)] == ["after", "in-thread"]

"""analyze's native mapper (cc_ops/reader/rank_stats.h, analysis/_native.py) against the
numpy mapper (analysis/mapper.py, ``NVTX_TF_ANALYZE_NATIVE=0``), value for value, on
recordings: written byte for byte in the recording format (random nesting over several
threads and processes, push/pop in two domains on one thread, start/end ranges ended on
other threads, events in the same ns: 0 ns ranges and equal starts, ranges left open,
registered strings, a domain of the same name in two processes, processes on different
clocks, steps and an epoch around them), and made by the recorder from a real program.
Counts, sums, min, max, quartiles, sketches, steps and step work are equal; m2 (the sum of
squared deviations) within float rounding (numpy sums in another order).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from conftest import _child_env

from nvtx_plugins_tf.recorder.analysis import mapper
from nvtx_plugins_tf.recorder.recording._synth import SegmentWriter

NAMES = ["data", "forward", "backward", "conv", "relu", "x"]


def _write_process(folder, rng, pid: int, realtime_ns: int, domains: dict[int, str], events: int) -> None:
    """One process's segment: 3 threads of random events (see the module docstring)."""
    seg = SegmentWriter(pid=pid, start_ns=1000, start_realtime_ns=realtime_ns, chunk_size=4096)
    threads = [seg.thread(pid + t) for t in range(3)]
    strings = {text: 1 + i for i, text in enumerate(NAMES + [f"step {k}" for k in range(40)] + list(domains.values()))}
    for text, sid in strings.items():
        threads[0].string(sid, text)
    threads[0].string(900, "registered one", domain=1)
    now = 1000
    for local, name in domains.items():
        threads[0].domain_create(now, local, strings[name])
    stacks = {(t, d): [] for t in range(3) for d in [0, *domains]}
    open_ids: list[int] = []
    next_id, step = pid * 1000, 0
    threads[0].push(now, strings["x"], domain=1)  # the epoch: around every step
    for _ in range(events):
        now += int(rng.integers(0, 3))  # (0: events in the same ns)
        t = int(rng.integers(0, 3))
        d = int(rng.choice([0, *domains]))
        op = rng.random()
        if t == 0 and d == 1 and len(stacks[0, 1]) == 0 and op < 0.3 and step < 40:
            threads[0].push(now, strings[f"step {step}"], domain=1)  # a step, top level in its domain
            stacks[0, 1].append("step")
            step += 1
        elif op < 0.4 and len(stacks[t, d]) < 6:
            if rng.random() < 0.05:
                threads[t].push(now, 900, domain=d, registered=True)
            else:
                threads[t].push(now, strings[NAMES[int(rng.integers(0, len(NAMES)))]], domain=d)
            stacks[t, d].append("range")
        elif op < 0.75 and stacks[t, d]:
            threads[t].pop(now, domain=d)
            stacks[t, d].pop()
        elif op < 0.85:
            threads[t].start(now, next_id, strings[NAMES[int(rng.integers(0, len(NAMES)))]], domain=d)
            open_ids.append(next_id)
            next_id += 1
        elif op < 0.95 and open_ids:
            threads[t].end(now, open_ids.pop(int(rng.integers(0, len(open_ids)))), domain=d)  # any thread
        else:
            threads[t].mark(now, strings["x"], domain=d)
    for (t, d), stack in stacks.items():  # close most ranges; some stay open
        for _ in stack[: max(0, len(stack) - int(rng.integers(0, 2)))]:
            now += int(rng.integers(0, 2))
            threads[t].pop(now, domain=d)
    if rng.random() < 0.5:
        threads[0].pop(now + 5, domain=1)  # the epoch closed (else: open, the last on its stack)
    seg.write(folder)


def _assert_same(native: list, reference: list) -> None:
    assert [r.name for r in native] == [r.name for r in reference]
    for a, b in zip(native, reference):
        for field in b.__dataclass_fields__:
            x, y = getattr(a, field), getattr(b, field)
            if field == "m2":
                np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-6, err_msg=f"{b.name} {field}")
            elif isinstance(y, np.ndarray):
                assert x.shape == y.shape and x.dtype.kind == y.dtype.kind, (b.name, field, x.shape, y.shape)
                assert np.array_equal(x, y), (b.name, field, x, y)
            else:
                assert x == y, (b.name, field, x, y)


def _both(path, monkeypatch, step=None):
    monkeypatch.setenv("NVTX_TF_ANALYZE_NATIVE", "0")
    reference = mapper.map_input(path, step, inclusive=True)
    monkeypatch.setenv("NVTX_TF_ANALYZE_NATIVE", "1")
    return mapper.map_input(path, step, inclusive=True), reference


@pytest.mark.parametrize("seed", range(6))
def test_native_mapper_is_the_numpy_mapper_on_written_recordings(tmp_path, monkeypatch, seed):
    rng = np.random.default_rng(seed)
    rec = tmp_path / "rank.nvtxrec"
    # two processes: "train" is local domain 1 in the first, 2 in the second (merged by name);
    # the second process on another clock (its realtime anchor 500 s later)
    _write_process(rec, rng, 100, 1_700_000_000 * 10**9, {1: "train"}, 3000)
    if seed % 3:
        _write_process(rec, rng, 200, 1_700_000_500 * 10**9, {1: "other", 2: "train"}, 3000)
    native, reference = _both(rec, monkeypatch)
    assert reference and all(r.n_steps for r in reference) and any(r.open_ranges for r in reference)
    assert sum(r.step_work.size for r in reference) > 0
    _assert_same(native, reference)
    # a step given (in a domain), and one that matches nothing
    _assert_same(*_both(rec, monkeypatch, mapper.StepSpec.parse("x@train")))
    _assert_same(*_both(rec, monkeypatch, mapper.StepSpec.parse("nothing")))


@pytest.mark.parametrize("native", ["1", "0"])
def test_inclusive_work_only_when_asked(tmp_path, monkeypatch, native):
    """analyze does not ask for the steps' inclusive work (compare does): without
    ``inclusive`` the mappers leave ``step_incl`` empty and every other field as with it."""
    rec = tmp_path / "rank.nvtxrec"
    _write_process(rec, np.random.default_rng(7), 100, 1_700_000_000 * 10**9, {1: "train"}, 3000)
    monkeypatch.setenv("NVTX_TF_ANALYZE_NATIVE", native)
    plain, asked = mapper.map_input(rec), mapper.map_input(rec, inclusive=True)
    assert [r.n_steps for r in plain] == [r.n_steps for r in asked] and all(r.n_steps for r in asked)
    for r in asked:
        assert r.step_incl.shape == r.step_work.shape and (r.step_incl >= r.step_work).all()
        assert (r.step_incl > r.step_work).any()  # (nested ranges: a parent's time keeps its children's)
    for r in plain:
        assert r.step_incl.shape == (0, 0)
        r.step_incl = next(a for a in asked if a.name == r.name).step_incl
    _assert_same(plain, asked)


@pytest.mark.parametrize("seed", range(3))
def test_steps_without_the_name_statistics(tmp_path, monkeypatch, seed):
    """watch's reads ask for no per-name statistics (``name_stats=False``): the native mapper
    leaves them empty and every other field (names, open ranges, steps, their work, incl.
    inclusive) is the full mapping's, on several processes with open ranges and an epoch."""
    from nvtx_plugins_tf.recorder.analysis._native import NAME_STATS

    rng = np.random.default_rng(seed)
    rec = tmp_path / "rank.nvtxrec"
    for pid in (100, 200):
        _write_process(rec, rng, pid, 1_700_000_000 * 10**9, {1: "train"}, 3000)
    monkeypatch.setenv("NVTX_TF_ANALYZE_NATIVE", "1")
    full = mapper.map_input(rec, inclusive=True)
    light = mapper.map_input(rec, inclusive=True, name_stats=False)
    assert len(full) == 2 and all(r.n_steps and r.count.size and r.open_ranges for r in full)
    for r, f in zip(light, full):
        assert r.names == f.names and r.work_rows.size and r.step_work.any()
        for name in NAME_STATS:
            assert getattr(r, name).size == 0, name
            setattr(r, name, getattr(f, name))
    _assert_same(light, full)


@pytest.mark.parametrize("seed", range(4))
def test_native_mapper_on_ranges_at_times_of_their_own(tmp_path, monkeypatch, seed):
    """Random nesting on 3 threads, every event at a time of its own but ranges of no length,
    steps inside an epoch; one domain (even seeds: the ranges nest strictly, the case the
    native mapper nests in one pass as they come, cc_ops/reader/range_parents.cc NestStep)
    or two (odd seeds: a thread's ranges of two domains overlap, and it sorts them)."""
    rng = np.random.default_rng(100 + seed)
    domains = [1] if seed % 2 == 0 else [1, 2]
    rec = tmp_path / "nested.nvtxrec"
    seg = SegmentWriter(pid=21, chunk_size=4096)
    threads = [seg.thread(21 + t) for t in range(3)]
    names = NAMES + [f"step {k}" for k in range(60)] + ["train", "other"]
    for i, text in enumerate(names):
        threads[0].string(1 + i, text)
    sid = {text: 1 + i for i, text in enumerate(names)}
    now = 1000
    threads[0].domain_create(now, 1, sid["train"]).domain_create(now, 2, sid["other"])
    threads[0].push(now, sid["x"], domain=1)  # the epoch
    stacks = {(t, d): [] for t in range(3) for d in domains}
    stacks[0, 1].append("epoch")
    step = 0
    for _ in range(4000):
        now += int(rng.integers(1, 4))
        t, d = int(rng.integers(0, 3)), int(rng.choice(domains))
        op = rng.random()
        if t == 0 and d == 1 and len(stacks[0, 1]) == 1 and op < 0.3 and step < 60:
            threads[0].push(now, sid[f"step {step}"], domain=1)
            stacks[0, 1].append("step")
            step += 1
        elif op < 0.45 and len(stacks[t, d]) < 7:
            threads[t].push(now, sid[NAMES[int(rng.integers(0, len(NAMES)))]], domain=d)
            if rng.random() < 0.1:
                threads[t].pop(now, domain=d)  # (no length)
            else:
                stacks[t, d].append("range")
        elif stacks[t, d] and stacks[t, d][-1] != "epoch":
            threads[t].pop(now, domain=d)
            stacks[t, d].pop()
    for (t, d), stack in stacks.items():
        for _ in stack:
            now += 1
            threads[t].pop(now, domain=d)
    seg.write(rec)
    native, reference = _both(rec, monkeypatch)
    assert reference[0].n_steps > 20 and reference[0].step_work.size
    _assert_same(native, reference)


def test_native_mapper_on_deep_nesting(tmp_path, monkeypatch):
    """3,000 ranges each inside the last (a deep recursion), in steps: the native mapper's
    insertion of each range past those inside it gives way to a sort."""
    rec = tmp_path / "deep.nvtxrec"
    seg = SegmentWriter(pid=9, chunk_size=1 << 16)
    t = seg.thread(9)
    t.string(1, "step 0").string(2, "f").string(3, "step 1")
    t.push(10, 1)
    for k in range(3000):
        t.push(20 + k, 2)
    for k in range(3000):
        t.pop(6000 + k // 2)  # (pairs of ends in the same ns)
    t.pop(9500).push(9500, 3).push(9600, 2).pop(9700).pop(9800)
    seg.write(rec)
    native, reference = _both(rec, monkeypatch)
    assert reference[0].n_steps == 2
    _assert_same(native, reference)


def test_native_sketch_buckets_at_their_bounds(tmp_path, monkeypatch):
    """Ranges lasting each bucket's least duration and 1 ns less (1 ns to 18 minutes; one
    name each, so each is its own sketch): the native mapper buckets them as numpy's log
    does, though it estimates with the float log."""
    from nvtx_plugins_tf.recorder.analysis import sketch

    bounds = [int(b) for b in sketch.bucket_bounds() if b < 2**40]
    lengths = sorted({d for b in bounds for d in (b - 1, b) if d > 0})
    rec = tmp_path / "bounds.nvtxrec"
    seg = SegmentWriter(pid=7, chunk_size=1 << 16)
    t = seg.thread(7)
    for i in range(8):
        t.string(1 + i, f"r{i}")
    now = 100
    for i, d in enumerate(lengths):
        t.push(now, 1 + i % 8).pop(now + d)
        now += d + 1
    seg.write(rec)
    native, reference = _both(rec, monkeypatch)
    assert sum(reference[0].count) == len(lengths) > 1500
    assert len(np.unique(reference[0].sketch_key)) > 1200
    _assert_same(native, reference)


def _write_lengths(rec, pid: int, sets: dict, rng) -> None:
    """A recording of one thread: for each name of ``sets``, ranges lasting its durations
    (in a random order), one after the other."""
    seg = SegmentWriter(pid=pid, chunk_size=1 << 16)
    t = seg.thread(pid)
    for i, name in enumerate(sets):
        t.string(1 + i, name)
    now = 100
    for i, lengths in enumerate(sets.values()):
        for d in rng.permutation(lengths):
            t.push(now, 1 + i).pop(now + int(d))
            now += int(d) + 1
    seg.write(rec)


def test_native_histogram_of_durations_of_a_small_span(tmp_path, monkeypatch):
    """Names with many ranges over a small span of durations (their quartiles and sketch read
    from a count per duration, walking the buckets' bounds): 0 ns ranges, every duration of
    a span crossing many bucket bounds, a few values repeated, one outlier (the span then too
    wide: by value), 513 ranges (the least read from counts) and 512 (by value)."""
    from nvtx_plugins_tf.recorder.analysis import sketch

    rng = np.random.default_rng(5)
    bounds = [int(b) for b in sketch.bucket_bounds() if 2 < b < 5000]
    sets = {
        "span": rng.integers(0, 3000, 6000),  # 0 ns and a dense span
        "bounds": np.repeat([d for b in bounds for d in (b - 1, b)], 3),
        "few": rng.choice([17, 18, 40, 41, 900], 4000),
        "outlier": np.append(rng.integers(20, 60, 3000), 10**9),
        "513": rng.integers(5, 300, 513),
        "512": rng.integers(5, 300, 512),
    }
    rec = tmp_path / "span.nvtxrec"
    _write_lengths(rec, 8, sets, rng)
    native, reference = _both(rec, monkeypatch)
    assert sorted(reference[0].count) == sorted(len(v) for v in sets.values())
    assert 0 in reference[0].min
    _assert_same(native, reference)


def test_native_histogram_of_most_durations(tmp_path, monkeypatch):
    """Names with many ranges, most of their durations in a small span and the others far
    above (rank_stats.cc: the span's first values counted, the others bucketed and selected
    by value): outliers spread over many buckets from the window's end (the first in the
    window's last bucket) to 10 s, a wider window (a name of 40,000), and one in 7 out of the
    window (too many: all by value)."""
    rng = np.random.default_rng(7)
    mn = 50
    tail = np.unique(np.geomspace(mn + 4096, 10**10, 400).astype(np.int64))
    sets = {
        "tail": np.concatenate([rng.integers(mn, mn + 4096, 4000), [mn, mn + 4095], tail]),
        "wide": np.concatenate([rng.integers(0, 10_000, 40_000), rng.integers(10_000, 10**7, 2000)]),
        "too many": np.concatenate([rng.integers(mn, 3000, 4000), rng.integers(5000, 10**6, 4000 // 7 + 1)]),
    }
    rec = tmp_path / "tail.nvtxrec"
    _write_lengths(rec, 9, sets, rng)
    native, reference = _both(rec, monkeypatch)
    assert sorted(reference[0].count) == sorted(len(v) for v in sets.values())
    assert len(reference[0].sketch_key) > 300
    _assert_same(native, reference)


def test_native_mapper_on_compact_events_and_odd_pops(tmp_path, monkeypatch):
    """Compact push/pop events (dated by their chunk's clock), a compact event before any full
    one (undated: lost), a pop with no push, a message id never defined, a range pushed in a
    chunk of a thread and popped in its next chunk, and ranges left open: analyze's reading
    (Decoder::NextRanges) and the rows the numpy mapper reads (Decoder::Next) agree."""
    from nvtx_plugins_tf.recorder.recording._synth import K_POP as pop
    from nvtx_plugins_tf.recorder.recording._synth import K_PUSH as push

    rec = tmp_path / "compact.nvtxrec"
    seg = SegmentWriter(pid=11, chunk_size=4096)
    a, b = seg.thread(11), seg.thread(12)
    a.compact(push, 3, msg=1)  # (no full event yet in the chunk: undated, lost)
    a.string(1, "step 0").string(2, "f").push(1000, 1)
    for k in range(400):  # (over more than one chunk: the step is popped in a later one)
        a.compact(push, 2 + k % 3, msg=2).compact(pop, 1 + k % 2)
    a.compact(push, 4, msg=77).compact(pop, 3)  # (a message never defined)
    a.pop(5000).pop(5001)  # (the step, then a pop with no push)
    a.push(6000, 1).compact(push, 5, msg=2).compact(pop, 5).compact(push, 1, msg=2)  # (left open)
    b.pop(100).push(200, 2).compact(pop, 50).compact(push, 0, msg=2).compact(pop, 0)
    seg.write(rec)
    native, reference = _both(rec, monkeypatch)
    assert reference[0].open_ranges == 2 and reference[0].n_steps == 1
    _assert_same(native, reference)


def test_native_mapper_on_an_empty_recording(tmp_path, monkeypatch):
    rec = tmp_path / "empty.nvtxrec"
    seg = SegmentWriter(pid=7)
    seg.thread(7).mark(2000)
    seg.write(rec)
    native, reference = _both(rec, monkeypatch)
    assert native == reference == []


WORKLOAD = """
import os, random, sys, threading, nvtx
random.seed(int(sys.argv[1]))
train = nvtx.get_domain("train")

def work(steps):
    for i in range(steps):
        with nvtx.annotate(f"step {i}", domain="train"):
            r = nvtx.start_range("io", domain="train")
            for _ in range(random.randint(1, 6)):
                d = random.choice(["train", "other"])
                with nvtx.annotate(random.choice(["data", "forward", "backward"]), domain=d):
                    with nvtx.annotate("layer", domain=d):
                        pass
            nvtx.end_range(r)
    nvtx.push_range("left open", domain="train")

ts = [threading.Thread(target=work, args=(30,)) for _ in range(2)]
[t.start() for t in ts]
work(40)
[t.join() for t in ts]
if os.fork() == 0:
    work(20)
    os._exit(0)
os.wait()
"""


def test_native_mapper_is_the_numpy_mapper_on_a_real_recording(tmp_path, monkeypatch):
    """Recorded by the recorder: 3 threads and a forked child, steps around nested ranges in
    two domains, start/end ranges, a range left open on each thread."""
    proc = subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", "record", "-o", str(tmp_path / "real"), "--",
         sys.executable, "-c", WORKLOAD, "3"],
        env=_child_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    native, reference = _both(tmp_path / "real.nvtxrec", monkeypatch)
    assert len(reference) == 2 and all(r.n_steps == 100 or r.n_steps == 20 for r in reference), reference
    assert all(r.open_ranges for r in reference)
    _assert_same(native, reference)

"""Benchmark the reader and the exporters on a synthetic 10M-event recording.

Generates (with numpy, straight in the on-disk format of cc_ops/format/record_format.h)
one segment with two threads: 4M push/pop pairs on one, 1M start/end pairs on the other
(10M events, 5M ranges, 20 messages), then times decoding, SQLite export, JSON export,
the summary, ``record``'s exports (JSON + SQLite + summary from one decode, the SQLite
file by a child process on two cores or more: recorder/outputs.py), and ``nvtx-tf export``
per type (sqlite, json, parquetdir, arrow: nsys 2023.4's formats) and of all four from one
decode, with the peak RSS of each export process (its own; SQLite's helper process apart).
Targets: each <= 30 s on a 2-core machine.

    python benchmarks/bench_exports.py [--events 10000000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nvtx_plugins_tf.recorder import export_json, export_sqlite, iter_batches, summarize  # noqa: E402
from nvtx_plugins_tf.recorder.recording._synth import (  # noqa: E402
    CHUNK_MAGIC,
    SegmentWriter,
    segment_header,
)

CHUNK = 256 * 1024
WORDS = CHUNK // 8


def _chunk_header_words(thread_index: int, tid: int, seq: int) -> np.ndarray:
    h = np.zeros(8, dtype=np.uint64)
    h[0] = CHUNK_MAGIC | (thread_index << 32)
    h[1] = tid
    h[2] = seq
    return h


def _word0(kind, msg, flags=0, domain=0):
    return np.uint64(kind | (flags << 8) | (domain << 16)) | (np.asarray(msg, dtype=np.uint64) << np.uint64(32))


def _data_chunks(thread_index, tid, first_seq, pair_words, n_pairs):
    """Chunks holding n_pairs records of pair_words each ([n, pair_words] uint64)."""
    per_chunk = (WORDS - 8 - 1) // pair_words.shape[1]
    chunks = []
    seq = first_seq
    for lo in range(0, n_pairs, per_chunk):
        block = pair_words[lo : lo + per_chunk].reshape(-1)
        c = np.zeros(WORDS, dtype=np.uint64)
        c[:8] = _chunk_header_words(thread_index, tid, seq)
        c[8 : 8 + len(block)] = block
        chunks.append(c)
        seq += 1
    return chunks


def generate(directory: Path, events: int = 10_000_000, pid: int = 4242, start_ns: int = 10**12) -> Path:
    n_se = events // 10  # start/end pairs
    n_pp = (events - 2 * n_se) // 2  # push/pop pairs
    rng = np.random.default_rng(0)
    # Definitions chunk per thread via the Python writer (strings 1..20, a domain).
    w = SegmentWriter(pid=pid, start_ns=start_ns, chunk_size=CHUNK, process_name="bench")
    ta, tb = w.thread(pid), w.thread(pid + 1)
    for t in (ta, tb):
        for i in range(1, 21):
            t.string(i, f"Dense {i}")
    ta.string(21, "bench").domain_create(start_ns + 1, 1, 21)
    defs = [np.frombuffer(bytes(c).ljust(CHUNK, b"\0"), dtype=np.uint64) for c in w.chunks]
    # Thread A: push/pop pairs, ~1 us apart.
    msgs = rng.integers(1, 21, n_pp, dtype=np.uint64)
    dur = rng.integers(100, 5000, n_pp, dtype=np.uint64)
    t0 = np.uint64(start_ns + 1000) + np.arange(n_pp, dtype=np.uint64) * np.uint64(6000)
    pp = np.empty((n_pp, 4), dtype=np.uint64)
    pp[:, 0] = _word0(1, msgs, domain=1)
    pp[:, 1] = t0
    pp[:, 2] = _word0(2, 0, domain=1)
    pp[:, 3] = t0 + dur
    # Thread B: start/end pairs.
    msgs = rng.integers(1, 21, n_se, dtype=np.uint64)
    dur = rng.integers(1000, 50000, n_se, dtype=np.uint64)
    t0 = np.uint64(start_ns + 1000) + np.arange(n_se, dtype=np.uint64) * np.uint64(20000)
    rid = np.arange(1, n_se + 1, dtype=np.uint64)
    se = np.empty((n_se, 6), dtype=np.uint64)
    se[:, 0] = _word0(3, msgs)
    se[:, 1] = t0
    se[:, 2] = rid
    se[:, 3] = _word0(4, 0)
    se[:, 4] = t0 + dur
    se[:, 5] = rid
    chunks = defs + _data_chunks(0, pid, 1, pp, n_pp) + _data_chunks(1, pid + 1, 1, se, n_se)
    path = directory / f"{pid}-{start_ns}.nvtxseg"
    with open(path, "wb") as f:
        f.write(segment_header(pid, 1, start_ns, 0, CHUNK, "bench", "bench_exports"))
        for c in chunks:
            f.write(c.tobytes())
    return path


def _record_exports(rec: Path, prefix: Path, png: bool = False):
    """What ``record`` does once the command ended: PREFIX.json, PREFIX.sqlite, the summary
    (and PREFIX.png with ``record --png``, its default window)."""
    from nvtx_plugins_tf.cli._exports import write_exports

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return write_exports(rec, prefix, png=png)


def _export_cli(rec: Path, prefix: Path, types: str) -> int:
    """``nvtx-tf export -t TYPES -o PREFIX REC`` in a child process; returns its peak RSS in
    KiB (os.wait4: that process's own, not a helper process's it forks for SQLite)."""
    import os
    import subprocess

    proc = subprocess.Popen(
        [sys.executable, "-m", "nvtx_plugins_tf", "export", "-t", types, "-o", str(prefix), str(rec)],
        stdout=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"nvtx-tf export -t {types} failed with exit status {proc.returncode}")
    return usage.ru_maxrss


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--keep", type=Path, help="work in this directory and keep the files")
    args = parser.parse_args(argv)
    work = args.keep or Path(tempfile.mkdtemp(prefix="nvtx_bench_"))
    rec = work / "bench.nvtxrec"
    rec.mkdir(parents=True, exist_ok=True)
    results = []

    def timed(name, fn):
        t = time.perf_counter()
        out = fn()
        results.append((name, time.perf_counter() - t))
        print(f"{name:<28} {results[-1][1]:8.2f} s", flush=True)
        return out

    try:
        seg = timed("generate", lambda: generate(rec, args.events))
        size = seg.stat().st_size
        rows = timed("decode (iter_batches)", lambda: sum(len(b) for b in iter_batches(rec)))
        timed("export SQLite", lambda: export_sqlite(rec, work / "bench.sqlite"))
        timed("export JSON", lambda: export_json(rec, work / "bench.json"))
        s = timed("summary (recording)", lambda: summarize(rec))
        timed("summary (SQLite)", lambda: summarize(work / "bench.sqlite"))
        timed("record's exports (all)", lambda: _record_exports(rec, work / "record"))
        for types in ("sqlite", "json", "parquetdir", "arrow", "sqlite,json,parquetdir,arrow"):
            name = f"export -t {types}" if "," not in types else "export -t (all four)"
            rss = timed(name, lambda types=types: _export_cli(rec, work / "cli" / types.replace(",", "_"), types))
            print(f"{'':<28} peak RSS {rss / 1024:.0f} MiB", flush=True)
        if importlib.util.find_spec("matplotlib") is not None:
            timed("same with --png", lambda: _record_exports(rec, work / "record_png", png=True))
        print()
        print(
            f"events: {args.events:,}  ranges: {rows:,}  segment: {size / 1e6:.0f} MB  "
            f"json: {(work / 'bench.json').stat().st_size / 1e6:.0f} MB  "
            f"sqlite: {(work / 'bench.sqlite').stat().st_size / 1e6:.0f} MB"
        )
        print()
        print(f"{'step':<28} {'seconds':>8}  {'target':>6}")
        for name, secs in results:
            target = "" if name == "generate" else ("ok" if secs <= 30 else "SLOW")
            print(f"{name:<28} {secs:8.2f}  {target:>6}")
        print()
        print("\n".join(s.format().splitlines()[:6]))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

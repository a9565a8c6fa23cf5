"""What analyze does in C-level passes for a long job (a name per step: 83,000 a rank), each
against the per-string code it replaced, on inputs where the fast path and its fallback
differ: a recording's string table decoded in one pass (recording/_decoder.py), a
parquetdir's texts numbered (nsys_inputs/batches.py), the label check of an export's names
(analysis/native_mapper.py), the summary's medians (analysis/summary.py)."""

from __future__ import annotations

import ctypes
import random
import statistics

import numpy as np
import pytest

from nvtx_plugins_tf.recorder.analysis import mapper, native_mapper
from nvtx_plugins_tf.recorder.analysis.summary import _median
from nvtx_plugins_tf.recorder.exports.parquet import export_parquetdir
from nvtx_plugins_tf.recorder.nsys_inputs.batches import ExportInfo, _Messages
from nvtx_plugins_tf.recorder.recording._decoder import _decoded
from nvtx_plugins_tf.recorder.recording._synth import SegmentWriter

# bytes that make valid and invalid UTF-8 (a lead byte cut short, a lone continuation), NUL
_BYTES = [0x41, 0x20, 0x3A, 0xC3, 0xA9, 0xE2, 0x82, 0xAC, 0xF0, 0x9F, 0x98, 0x80, 0x80, 0xFF, 0x1B, 0x0A]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("with_nul", [False, True])
def test_string_table_decoded_as_one_string_at_a_time(seed, with_nul):
    """The NUL-separated pass (no NUL in the strings) and the string-by-string fallback give
    each string's ``decode("utf-8", errors="replace")``."""
    rng = random.Random(seed)
    for _ in range(300):
        parts = [bytes(rng.choice(_BYTES) for _ in range(rng.randrange(0, 7))) for _ in range(rng.randrange(0, 9))]
        if with_nul and parts:
            parts[rng.randrange(len(parts))] += b"\0x"
        raw = b"".join(parts)
        buf = ctypes.create_string_buffer(raw, len(raw) + 8)
        lengths = np.array([len(p) for p in parts], dtype=np.uint32)
        assert _decoded(buf, lengths) == [p.decode("utf-8", errors="replace") for p in parts]


def test_parquetdir_texts_numbered_as_they_first_come():
    """``indexes`` numbers a batch's new texts as ``of`` one by one does: first come, first
    numbered, NULL as the empty message, a text met in an earlier batch kept."""
    rng = random.Random(4)
    fast, slow = _Messages(ExportInfo()), _Messages(ExportInfo())
    for _ in range(50):
        texts = [rng.choice([None, "", "a", "b:c", f"step {rng.randrange(40)}"]) for _ in range(rng.randrange(0, 30))]
        assert fast.indexes(texts) == [slow.of(t) for t in texts]
    assert fast.values == slow.values and len(set(fast.values)) == len(fast.values)


def _export(tmp_path, messages: dict[int, str]):
    """A parquetdir of one thread's ranges: message id -> text in domain 1 ("train") for ids
    below 10, else in the default domain."""
    rec = tmp_path / "rank.nvtxrec"
    seg = SegmentWriter(pid=7)
    t = seg.thread(7).string(1, "train", 1).domain_create(1, 1, 1)
    for k, (sid, text) in enumerate(sorted(messages.items())):
        domain = 1 if sid < 10 else 0
        t.string(sid, text, domain).push(100 + 10 * k, sid, domain).pop(105 + 10 * k, domain)
    seg.write(rec)
    out = tmp_path / "rank_pqtdir"
    export_parquetdir(rec, out)
    return out


def test_export_names_alike_only_with_a_colon(tmp_path):
    """Two names of one label ("train:x" in the default domain, "x" in train) send the export
    to the numpy mapper (None), which merges them; names without ":" are mapped natively."""
    alike = _export(tmp_path / "a", {2: "x", 20: "train:x"})
    assert native_mapper.map_export(alike, None) is None
    (merged,) = mapper.map_input(alike, None)
    assert merged.names == [("train", "x")] and merged.count.tolist() == [2]
    apart = native_mapper.map_export(_export(tmp_path / "b", {2: "x", 20: "y"}), None)
    assert apart is not None and sorted(m for _, m in apart[0].names) == ["x", "y"]


def test_summary_median_is_statistics_median():
    rng = random.Random(5)
    for _ in range(2000):
        big = rng.random() < 0.3
        values = [rng.randrange(-(2**62), 2**62) if big else rng.randrange(50) for _ in range(rng.randrange(1, 10))]
        got, want = _median(np.array(values, dtype=np.int64)), statistics.median(values)
        assert got == want and type(got) is type(want)

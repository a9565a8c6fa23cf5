"""What analyze does in C-level passes for a long job (a name per step: 83,000 a rank), each
against the per-string code it replaced, on inputs where the fast path and its fallback
differ: a recording's string table decoded in one pass (recording/_decoder.py), a
parquetdir's texts numbered (nsys_inputs/batches.py: batch by batch in Python, or all at
once by Arrow's dictionary unifier), the label check of an export's names
(analysis/native_mapper.py), the summary's medians (analysis/summary.py)."""

from __future__ import annotations

import ctypes
import random
import shutil
import statistics

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_analyze_native import _assert_same, _write_process

from nvtx_plugins_tf.recorder.analysis import mapper, native_mapper
from nvtx_plugins_tf.recorder.analysis.summary import _median
from nvtx_plugins_tf.recorder.exports.parquet import export_parquetdir
from nvtx_plugins_tf.recorder.nsys_inputs import batches
from nvtx_plugins_tf.recorder.nsys_inputs.batches import ExportInfo, _Messages, _UnifiedTexts
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


def _long_job_texts(tmp_path, group_rows: int, registered: bool = False):
    """A parquetdir whose NVTX_EVENTS holds texts as a long job's do (a new name every few
    rows, names met again, "" and NULL among them: each row group's dictionary its own) and
    no textId (``registered``: a few rows name a registered string instead), written
    ``group_rows`` rows a group."""
    rec = tmp_path / "rank.nvtxrec"
    _write_process(rec, np.random.default_rng(group_rows), 100, 1_700_000_000 * 10**9, {1: "train"}, 3000)
    export_parquetdir(rec, tmp_path / "src_pqtdir")
    out = tmp_path / "rank_pqtdir"
    shutil.copytree(tmp_path / "src_pqtdir", out)
    events = pq.read_table(out / "NVTX_EVENTS.parquet")
    rng = random.Random(group_rows)
    kinds = events.column("eventType").to_pylist()
    choices = lambda k: [None, "", "a", "b:c", f"step {k // 4}", f"step {rng.randrange(k + 1) // 4}"]  # noqa: E731
    texts = [  # (a domain's creation keeps its name)
        text if kind == 75 else rng.choice(choices(k))
        for k, (kind, text) in enumerate(zip(kinds, events.column("text").to_pylist()))
    ]
    events = events.set_column(events.schema.get_field_index("text"), "text", pa.array(texts, pa.string()))
    ids = [1 if registered and k % 50 == 3 and kinds[k] != 75 else None for k in range(len(kinds))]
    events = events.set_column(events.schema.get_field_index("textId"), "textId", pa.array(ids, pa.int64()))
    if registered:
        pq.write_table(pa.table({"id": pa.array([1], pa.int64()), "value": ["registered"]}), out / "StringIds.parquet")
    pq.write_table(events, out / "NVTX_EVENTS.parquet", row_group_size=group_rows)
    return out


def _fed(path) -> tuple[ExportInfo, np.ndarray]:
    """feed_export of ``path``: what it leaves, and each row's message index."""
    got = []
    info = batches.feed_export(path, lambda *row: got.append(row[-1].copy()))
    return info, np.concatenate(got)


@pytest.mark.parametrize("group_rows", [7, 400, 5000])
def test_parquetdir_texts_unified_as_batches_number_them(tmp_path, monkeypatch, group_rows):
    """Arrow's unifier numbers the texts as ``_Messages.lut`` does batch by batch (the same
    message list, each row the same index, NULL as the empty message), for row groups read
    several to a batch, one to a batch, and cut in batches; the rank results are the same."""
    monkeypatch.setattr(batches, "BATCH_ROWS", 1000)
    monkeypatch.setenv("NVTX_TF_ANALYZE_NATIVE", "1")
    path = _long_job_texts(tmp_path, group_rows)
    used = []
    read = _UnifiedTexts.read.__func__
    monkeypatch.setattr(_UnifiedTexts, "read", classmethod(lambda cls, *a: used.append(read(cls, *a)) or used[-1]))
    fast, fast_results = _fed(path), mapper.map_input(path, mapper.StepSpec.parse("step"))
    assert len(used) == 2 and all(u is not None for u in used)
    monkeypatch.setattr(_UnifiedTexts, "read", classmethod(lambda cls, *a: None))  # (lut's path)
    slow, slow_results = _fed(path), mapper.map_input(path, mapper.StepSpec.parse("step"))
    assert fast[0].messages == slow[0].messages and len(set(fast[0].messages)) == len(fast[0].messages) > 200
    assert fast[0].domain_names == slow[0].domain_names and fast[0].rows == slow[0].rows
    np.testing.assert_array_equal(fast[1], slow[1])
    assert fast_results[0].n_steps > 100
    _assert_same(fast_results, slow_results)


def test_parquetdir_unified_texts_taken_across_batches(tmp_path):
    """A span of rows that crosses the unifier's chunks (or is empty) gets the rows' indexes."""
    path = _long_job_texts(tmp_path, 97)
    reader = pq.ParquetFile(path / "NVTX_EVENTS.parquet", read_dictionary=["text"])
    unified = _UnifiedTexts.read(reader, _Messages(ExportInfo()))
    whole = unified.message(0, reader.metadata.num_rows)
    rng = random.Random(3)
    for _ in range(40):
        start = rng.randrange(len(whole))
        n = rng.randrange(len(whole) - start + 1)
        np.testing.assert_array_equal(unified.message(start, n), whole[start : start + n])


def test_parquetdir_registered_strings_keep_lut_numbering(tmp_path, monkeypatch):
    """A registered string (textId) is numbered when first met, between the texts: the
    unifier is not used; nor when a text was numbered before it."""
    numbered = _Messages(ExportInfo())
    numbered.of("x")
    assert _UnifiedTexts.read(None, numbered) is None  # (the reader is not read)
    path = _long_job_texts(tmp_path, 400, registered=True)
    used = []
    monkeypatch.setattr(_UnifiedTexts, "read", classmethod(lambda cls, *a: used.append(a)))
    info, message = _fed(path)
    assert not used and "registered" in info.messages
    assert (message == info.messages.index("registered")).sum() > 10


@pytest.mark.parametrize(
    "texts",
    [
        [pa.DictionaryArray.from_arrays(pa.array([0, 1], pa.int32()), pa.array(["a", None]))],  # (a NULL text)
        [pa.array(["a", "b"])],  # (no dictionary)
        [pa.array([0], pa.int32()).dictionary_encode()],  # (a dictionary of integers)
        [pa.array(["a"]).dictionary_encode(), pa.array(["b"], pa.large_string()).dictionary_encode()],  # (types)
    ],
)
def test_parquetdir_odd_text_dictionaries_keep_lut_numbering(monkeypatch, texts):
    """Texts the unifier does not number as ``lut`` would: nothing numbered, None."""
    monkeypatch.setattr(batches, "_batches", lambda reader, columns: (pa.record_batch([t], ["text"]) for t in texts))
    messages = _Messages(ExportInfo())
    assert _UnifiedTexts.read(None, messages) is None and messages.values == [""]


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

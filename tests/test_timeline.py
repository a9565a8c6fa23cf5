"""The PNG timeline's layout (issue 12, item 2), tested without looking at pixels: every
range of the window is drawn, boxes of one row never overlap, labels only where they fit
(measured as drawn), family domains in their family's colours, the first (tracing) step
left out by default, steps found the same way whatever the hash seed."""

import os
import subprocess
import sys

import numpy as np
import pytest

from nvtx_plugins_tf.recorder.recording._decoder import FLAG_HAS_COLOR, KIND_PUSH_POP, KIND_START_END, ROW_DTYPE
from nvtx_plugins_tf.recorder.timeline.layout import (
    ELLIPSIS,
    LABEL_PAD_PX,
    MIN_LABEL_CHARS,
    box_color,
    label_width_px,
    layout,
)
from nvtx_plugins_tf.recorder.timeline.render import TimelineSink, _figure, render_timeline

pytest.importorskip("matplotlib")

MS = 1_000_000
STRINGS = ["", "Train", "epoch 0", "epoch 1", "epoch 2"] + [f"batch {i}" for i in range(5)]
STRINGS += [f"Dense {k}" for k in range(1, 6)] + ["Dense 1 grad", "a very long name", "WWWWWWWWWWWW", "iiii"]
DOMAINS = ["", "Keras", "Forward", "Backward", "mine"]


class Rows:
    """Rows as the reader decodes them, built range by range."""

    def __init__(self):
        self.rows = []

    def add(self, start, end, msg, domain, kind=KIND_START_END, tid=1, depth=0, color=None):
        r = np.zeros(1, dtype=ROW_DTYPE)
        r["start_ns"], r["end_ns"], r["pid"], r["tid"], r["end_tid"] = start * MS, end * MS, 1, tid, tid
        r["message"], r["domain"], r["kind"], r["depth"] = STRINGS.index(msg), DOMAINS.index(domain), kind, depth
        if color is not None:
            r["flags"], r["color"] = FLAG_HAS_COLOR, color
        self.rows.append(r)
        return self

    def array(self):
        return np.concatenate(self.rows)


def _rows():
    r = Rows()
    # NVTXCallback's colours (epoch blue, batches cyan): Keras must stay green all the same
    r.add(0, 100, "Train", "Keras", color=0xFF76B900)
    r.add(0, 100, "epoch 0", "Keras", color=0xFF1F77B4)
    for i, (s, e) in enumerate([(0, 70), (70, 80), (80, 90), (90, 100)]):  # batch 0: tracing, the longest
        r.add(s, e, f"batch {i}", "Keras", color=0xFF17BECF)
        r.add(s + 1, s + 3, "Dense 1", "Forward", tid=2)
        r.add(s + 4, s + 6, "Dense 1 grad", "Backward", tid=2, color=0xFF0000FF)
        r.add(s + 6, s + 6.01, "a very long name", "Forward", KIND_PUSH_POP, tid=2)
        r.add(s + 7, s + 8, "iiii", "mine", tid=2, color=0xFFFF00FF)
    return r.array()


def _plan(rows, **kw):
    return layout(rows, STRINGS, DOMAINS, {}, origin=0, last_ns=int(rows["end_ns"].max()), **kw)


def test_every_range_of_the_window_drawn_and_no_overlap_in_a_row():
    rows = _rows()
    plan = _plan(rows)
    assert plan.window_ms == (70.0, 100.0)  # batch 0, the tracing step, left out
    in_window = [(s, e) for s, e in zip(rows["start_ns"] / MS, rows["end_ns"] / MS) if e >= 70]
    assert len(plan.boxes) == len(in_window)
    by_row = {}
    for b in plan.boxes:
        by_row.setdefault((b.lane, b.row), []).append(b)
    for boxes in by_row.values():
        boxes.sort(key=lambda b: b.x0)
        for a, b in zip(boxes, boxes[1:]):
            assert a.x1 <= b.x0, (a, b)
    # Train, epoch and the batches stack on three rows of the first lane
    assert {b.row for b in plan.boxes if b.lane == 0} == {0, 1, 2}
    assert plan.domains == ["Keras", "Forward", "Backward", "mine"]


def test_family_domains_take_their_family_colours_whatever_nvtx_color_they_set():
    plan = _plan(_rows(), window="all")
    for b in plan.boxes:
        r, g, bl, _ = box_color(b)
        if b.family == "Keras":
            assert g > r and g > bl, b  # greens, not NVTXCallback's blue and cyan
        elif b.family == "Forward":
            assert bl > g > r, b
        elif b.family == "Backward":
            assert r > g > bl, b  # oranges, not the range's own blue
        else:  # another domain keeps the range's own colour
            assert (r, g, bl) == (1.0, 0.0, 1.0), b
    assert {b.family for b in plan.boxes} == {"Keras", "Forward", "Backward", ""}


def _boxes_and_texts(plan):
    """Each labelled box's extent and its drawn label's extent, in pixels."""
    fig, ax = _figure(plan, "all")
    try:
        renderer = fig.canvas.get_renderer()
        labelled = [b for b in plan.boxes if b.label and not b.mark]
        assert len(ax.texts) == len(labelled)
        out = []
        for b, text in zip(labelled, ax.texts):
            assert text.get_text() == b.label
            (x0, _), (x1, _) = ax.transData.transform([(b.x0, 0), (b.x1, 0)])
            extent = text.get_window_extent(renderer)
            out.append((b, (x0, x1), (extent.x0, extent.x1)))
        return out
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_labels_only_where_they_fit_as_drawn():
    r = Rows()
    w = label_width_px("WWWWWWWWWWWW")
    # A 5.5 px-per-character rule let this wide-glyph label overrun its box.
    assert w > 5.5 * 12 + 4
    for k in range(20):  # box widths around the label's width, 1 ms = 1 px below
        r.add(k * 200, k * 200 + w - 10 + k, "WWWWWWWWWWWW", "Forward")
        r.add(k * 200 + 100, k * 200 + 100 + 2 * LABEL_PAD_PX + 4 * k, "iiii", "Forward")
    rows = r.array()
    plan = _plan(rows, window="all", width_px=float(rows["end_ns"].max() / MS))
    drawn = _boxes_and_texts(plan)
    for b, (bx0, bx1), (tx0, tx1) in drawn:
        assert bx0 < tx0 and tx1 <= bx1, (b, (bx0, bx1), (tx0, tx1))
    for b in plan.boxes:
        room = (b.x1 - b.x0) / plan.ms_per_px - 2 * LABEL_PAD_PX
        if label_width_px(b.name) <= room:
            assert b.label == b.name  # the whole name wherever it fits
        elif b.label is not None:  # else its first characters (six at least) and an ellipsis
            assert b.label.endswith(ELLIPSIS) and b.name.startswith(b.label[:-1])
            assert len(b.label) - 1 >= len(b.name[:MIN_LABEL_CHARS].rstrip())
    labels = {b.label for b in plan.boxes}
    assert {"WWWWWWWWWWWW", "iiii", None} <= labels and any(x and x.endswith(ELLIPSIS) for x in labels)


def test_labels_of_the_example_fit_and_tiny_boxes_have_none():
    plan = _plan(_rows(), width_px=1000)
    for b, (bx0, bx1), (tx0, tx1) in _boxes_and_texts(plan):
        assert bx0 < tx0 and tx1 <= bx1, b
    labelled = {b.label for b in plan.boxes}
    assert "Train" in labelled and "a very long name" not in labelled  # a 0.01 ms box


def test_a_line_where_each_step_of_the_window_begins():
    rows = _rows()
    assert _plan(rows).step_starts == [80.0, 90.0]  # batches 2 and 3; batch 1 begins the window
    assert _plan(rows, window="all").step_starts == [70.0, 80.0, 90.0]
    fig, ax = _figure(_plan(rows), "1:")
    try:
        lines = [c for c in ax.collections if c.get_linestyle()[0][1] is not None]  # dashed
        assert [seg[0][0] for seg in lines[0].get_segments()] == [80.0, 90.0]
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_window_picks_steps_or_everything():
    rows = _rows()
    assert _plan(rows, window="all").window_ms == (0.0, 100.0)
    assert _plan(rows, window="2:2").window_ms == (80.0, 90.0)
    with pytest.raises(ValueError, match="steps 0..3"):
        _plan(rows, window="7:")
    with pytest.raises(ValueError, match="window 'two'"):
        _plan(rows, window="two")


def _batches_and_dense():
    """5 batches, 5 Dense layers in each: two families of five numbered names."""
    r = Rows()
    for i in range(5):
        r.add(10 * i, 10 * i + 9, f"batch {i}", "Keras")
        for k in range(1, 6):
            r.add(10 * i + k, 10 * i + k + 0.5, f"Dense {k}", "Forward", tid=2)
    return r.array()


_SEED_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from test_timeline import _batches_and_dense, _plan
print(_plan(_batches_and_dense(), window="1:1").window_ms)
"""


def test_steps_are_the_batches_whatever_the_hash_seed(child_env):
    # A set of names decided the family before: the batches or the 25 Dense ranges,
    # by PYTHONHASHSEED.
    script = _SEED_SCRIPT.format(tests=os.path.dirname(__file__))
    for seed in range(6):
        proc = subprocess.run(
            [sys.executable, "-c", script],
            env=child_env(PYTHONHASHSEED=str(seed)),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "(10.0, 19.0)", (seed, proc.stdout)


def test_without_batches_the_non_overlapping_family_covering_most_time_is_the_steps():
    r = Rows()
    for i in range(3):
        r.add(100 * i, 100 * i + 90, f"Dense {i + 1}", "Forward")  # three long ranges one after another
        r.add(100 * i, 100 * i + 95, f"epoch {i}", "Keras")  # longer, but overlapping each other:
        r.add(100 * i + 50, 100 * i + 150, f"epoch {i}", "Keras", tid=2)
    assert _plan(r.array(), window="1:1").window_ms == (100.0, 190.0)
    r = Rows()
    for i in range(3):  # a tie: the first name in sorted order ("Dense" < "epoch")
        r.add(100 * i, 100 * i + 90, f"epoch {i}", "Keras")
        r.add(100 * i + 1, 100 * i + 91, f"Dense {i + 1}", "Forward", tid=2)
    assert _plan(r.array(), window="1:1").window_ms == (101.0, 191.0)


def _synthetic(tmp_path, long_outside: int, short_inside: int):
    """A recording of three steps: ``long_outside`` long ranges in step 0 (tracing), and
    ``short_inside`` short ones in step 1."""
    from nvtx_plugins_tf.recorder.recording._synth import SegmentWriter

    rec = tmp_path / "rec.nvtxrec"
    w = SegmentWriter(pid=7, start_ns=1_000, chunk_size=1 << 16)
    main, worker = w.thread(7), w.thread(8)
    main.string(1, "step 0").string(2, "step 1").string(3, "step 2").string(4, "op")
    worker.string(4, "op")
    for i in range(3):
        main.start(10_000 + i * 1_000_000, 1 + i, 1 + i)
        main.end(10_000 + i * 1_000_000 + 900_000, 1 + i)
    for k in range(long_outside):
        worker.push(20_000 + k * 10, 4).pop(20_000 + k * 10 + 500_000)
    for k in range(short_inside):
        worker.push(1_020_000 + k * 100, 4).pop(1_020_000 + k * 100 + 50)
    w.write(rec)
    return rec


@pytest.mark.parametrize("spill_rows", [1_000_000, 16])
def test_window_applied_before_the_cap(tmp_path, spill_rows):
    from nvtx_plugins_tf.recorder.exports.one_pass import feed
    from nvtx_plugins_tf.recorder.recording.reader import RecordingReader

    rec = _synthetic(tmp_path, long_outside=300, short_inside=40)
    with RecordingReader(rec) as reader:
        sink = TimelineSink(reader, tmp_path / "t.png", max_ranges=100, window="1:1", spill_rows=spill_rows)
        feed(reader, [sink])
        sink.finish()
    # the whole recording holds 343 ranges, its window 41 (step 1 and its 40 short ops):
    # every one of them is drawn, though 300 longer ones lie outside
    assert len(sink.plan.boxes) == sink.plan.ranges_in_window == 41
    assert sink.plan.step_starts == []  # one step shown
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_cap_that_drops_ranges_of_the_window_says_so(tmp_path, capsys):
    from nvtx_plugins_tf.recorder.exports.one_pass import feed
    from nvtx_plugins_tf.recorder.recording.reader import RecordingReader

    rec = _synthetic(tmp_path, long_outside=10, short_inside=40)
    with RecordingReader(rec) as reader:
        sink = TimelineSink(reader, tmp_path / "t.png", max_ranges=25, window="1:1")
        feed(reader, [sink])
        sink.finish()
    assert (len(sink.plan.boxes), sink.plan.ranges_in_window) == (25, 41)
    assert any(b.x1 - b.x0 > 0.5 for b in sink.plan.boxes)  # the longest: step 1 itself
    fig, ax = _figure(sink.plan, "1:1")
    assert "25 of 41 ranges, the longest" in ax.get_title()
    err = capsys.readouterr().err
    assert err.count("41 ranges") == 1 and "25 longest" in err


def test_the_sink_finds_the_steps_among_all_its_rows(tmp_path):
    from nvtx_plugins_tf.recorder.exports.one_pass import feed
    from nvtx_plugins_tf.recorder.recording.reader import RecordingReader

    rec = _synthetic(tmp_path, long_outside=5, short_inside=5)
    with RecordingReader(rec) as reader:
        sink = TimelineSink(reader, tmp_path / "t.png", window="all", spill_rows=4)
        feed(reader, [sink])
        sink.finish()
        origin = reader.origin_ns
    assert sink.plan.step_starts == [(10_000 + i * 1_000_000 - origin) / 1e6 for i in (1, 2)]
    assert len(sink.plan.boxes) == 13


def test_render_writes_a_png(tmp_path):
    import nvtx

    from nvtx_plugins_tf.testing import capture

    with capture(keep=True) as rec:
        for i in range(3):
            with nvtx.annotate(f"step {i}", domain="Keras"):
                with nvtx.annotate("Dense 1", domain="Forward"):
                    pass
    out = render_timeline(rec.directory, tmp_path / "t.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_bad_window_is_named_before_anything_is_read(tmp_path):
    with pytest.raises(ValueError, match="window '1-2'"):
        render_timeline(_synthetic(tmp_path, 1, 1), tmp_path / "t.png", window="1-2")


def test_png_window_is_checked_by_the_cli(child_env):
    proc = subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", "record", "--png-window", "two", "-o", "x", "--", "true"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("nvtx-tf: error: argument --png-window: 'two'")


@pytest.mark.parametrize(
    "program, title",
    [
        ("import nvtx; nvtx.mark('only a mark'); nvtx.mark('another')", "(0 ranges, 2 marks, steps 1:)"),
        ("import nvtx\nwith nvtx.annotate('one range ✓ 日本 🙂', domain='領域'): pass", "(1 range, steps 1:)"),
    ],
    ids=["marks only", "one range, glyphs the font lacks"],
)
def test_png_of_a_tiny_recording(program, title, tmp_path, child_env):
    """Issue 21.11: marks only (before: nothing visible, at the window's very edges), one range
    (before: '1 ranges'), names in scripts the font lacks (before: a 'Glyph ... missing'
    warning per character and empty boxes): drawn with no warning, under a title that names
    the recording."""
    import subprocess
    import sys

    from nvtx_plugins_tf.recorder.exports.one_pass import feed
    from nvtx_plugins_tf.recorder.recording.reader import RecordingReader

    cmd = [sys.executable, "-W", "error", "-m", "nvtx_plugins_tf", "record", "-o", str(tmp_path / "tiny"), "--png"]
    proc = subprocess.run([*cmd, "--", sys.executable, "-c", program], env=child_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr and "Glyph" not in proc.stderr, proc.stderr
    png = tmp_path / "tiny.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 2000
    with RecordingReader(tmp_path / "tiny.nvtxrec") as reader:
        sink = TimelineSink(reader, tmp_path / "again.png")
        feed(reader, [sink])
        sink.finish()
    fig, ax = _figure(sink.plan, "1:", "tiny")
    assert ax.get_title() == f"NVTX timeline of tiny {title}", ax.get_title()
    lo, hi = ax.get_xlim()
    assert all(lo < b.x0 and b.x1 < hi for b in sink.plan.boxes)  # nothing on the edges
    texts = [t.get_text() for t in ax.texts] + [t.get_text() for t in ax.get_yticklabels()]
    assert not any("日" in t or "🙂" in t for t in texts), texts

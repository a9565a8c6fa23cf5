"""The PNG timeline's layout (issue 12, item 2), tested without looking at pixels: every
range of the window is drawn, boxes of one row never overlap, labels only where they fit,
the first (tracing) step is left out by default."""

import numpy as np
import pytest

from nvtx_plugins_tf.recorder._decoder import KIND_PUSH_POP, KIND_START_END, ROW_DTYPE
from nvtx_plugins_tf.recorder.timeline import CHAR_PX, layout, render_timeline

MS = 1_000_000
STRINGS = ["", "Train", "epoch 0"] + [f"batch {i}" for i in range(4)] + ["Dense 1", "Dense 1 grad", "a very long name"]
DOMAINS = ["", "Keras", "Forward", "Backward"]


def _rows():
    rows = []

    def add(start, end, msg, domain, kind, tid=1, depth=0):
        r = np.zeros(1, dtype=ROW_DTYPE)
        r["start_ns"], r["end_ns"], r["pid"], r["tid"], r["end_tid"] = start * MS, end * MS, 1, tid, tid
        r["message"], r["domain"], r["kind"], r["depth"] = STRINGS.index(msg), DOMAINS.index(domain), kind, depth
        rows.append(r)

    add(0, 100, "Train", "Keras", KIND_START_END)
    add(0, 100, "epoch 0", "Keras", KIND_START_END)
    for i, (s, e) in enumerate([(0, 70), (70, 80), (80, 90), (90, 100)]):  # batch 0: tracing, the longest
        add(s, e, f"batch {i}", "Keras", KIND_START_END)
        add(s + 1, s + 3, "Dense 1", "Forward", KIND_START_END, tid=2)
        add(s + 4, s + 6, "Dense 1 grad", "Backward", KIND_START_END, tid=2)
        add(s + 6, s + 6.01, "a very long name", "Forward", KIND_PUSH_POP, tid=2)
    return np.concatenate(rows)


def test_every_range_of_the_window_drawn_and_no_overlap_in_a_row():
    rows = _rows()
    plan = layout(rows, STRINGS, DOMAINS, {}, origin=0, last_ns=100 * MS)
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
    assert plan.domains == ["Keras", "Forward", "Backward"]


def test_labels_only_where_they_fit():
    plan = layout(_rows(), STRINGS, DOMAINS, {}, origin=0, last_ns=100 * MS, width_px=1000)
    ms_per_px = (plan.window_ms[1] - plan.window_ms[0]) / 1000
    for b in plan.boxes:
        if b.label is not None:
            assert (b.x1 - b.x0) / ms_per_px >= CHAR_PX * len(b.label)
    labelled = {b.label for b in plan.boxes}
    assert "Train" in labelled and "a very long name" not in labelled  # a 0.01 ms box


def test_window_picks_steps_or_everything():
    rows = _rows()
    assert layout(rows, STRINGS, DOMAINS, {}, 0, 100 * MS, window="all").window_ms == (0.0, 100.0)
    assert layout(rows, STRINGS, DOMAINS, {}, 0, 100 * MS, window="2:2").window_ms == (80.0, 90.0)
    with pytest.raises(ValueError, match="steps 0..3"):
        layout(rows, STRINGS, DOMAINS, {}, 0, 100 * MS, window="7:")


def test_render_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    import nvtx

    from nvtx_plugins_tf.testing import capture

    with capture(keep=True) as rec:
        for i in range(3):
            with nvtx.annotate(f"step {i}", domain="Keras"):
                with nvtx.annotate("Dense 1", domain="Forward"):
                    pass
    out = render_timeline(rec.directory, tmp_path / "t.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_png_window_is_checked_by_the_cli(child_env):
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", "record", "--png-window", "two", "-o", "x", "--", "true"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("nvtx-tf: error: argument --png-window: 'two'")

"""``watch`` over a long run read in many polls gives what one read of the finished run gives,
and ``analyze``'s figures (issue 47: the live figures equal the offline analysis, to the ns,
however the run was cut into reads).

A rank under ``nvtx-tf record`` writes 1,500 steps (nested ranges, 40 a step, a sleep each)
while a :class:`~nvtx_plugins_tf.recorder.watch.session.Watch` polls its folder as fast as it
can; then a new Watch reads the finished recording once. Every step object is the same in
both, and its ``duration_ns`` is ``analyze``'s pace Duration. The polls while it is written
read it in parts (where the last read stopped: among compact events, across chunks), the last
one whole.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pyarrow.parquet as pq

RANK = """
import time, nvtx
for i in range(1500):
    with nvtx.annotate(f"step {i}", domain="train"):
        with nvtx.annotate("load", domain="train"):
            time.sleep(0.002)
        with nvtx.annotate("compute", domain="train"):
            for k in range(37):
                nvtx.push_range(f"layer{k % 5}", domain="train")
                nvtx.pop_range(domain="train")
"""
STEPS = 1500


def _cli(*args) -> list[str]:
    return [sys.executable, "-m", "nvtx_plugins_tf", *map(str, args)]


def _steps(objects: list[dict]) -> dict:
    return {(o["rank"], o["step"]): o for o in objects if o["kind"] == "step"}


def test_many_polls_give_what_one_read_gives_and_analyzes_pace(tmp_path, child_env):
    from nvtx_plugins_tf.recorder.watch.session import Watch

    script = tmp_path / "rank.py"
    script.write_text(RANK)
    folder = tmp_path / "job"
    folder.mkdir()
    rank = subprocess.Popen(
        _cli("record", "-o", folder / "rank0", "--export", "json", "--", sys.executable, script),
        env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    live = Watch([str(folder)])
    polled, polls_with_steps = [], 0
    deadline = time.monotonic() + 600  # (a guard against a hang, not a figure)
    while not live.done and time.monotonic() < deadline:
        new = live.poll()
        polls_with_steps += any(o["kind"] == "step" for o in new)
        polled += new
        time.sleep(0.02)
    assert rank.wait(timeout=300) == 0, rank.stderr.read()
    assert live.done
    # the run was read while written, in many reads (else this compares one read with one read)
    print(f"{polls_with_steps} polls brought steps")
    assert polls_with_steps >= 5, polls_with_steps
    # read in parts while written (tests/test_watch_live.py), never falling back to whole reads
    (source,) = live.tailer.sources.values()
    assert not source.live_off, source.live_off
    assert source.live_maps >= 4, (source.maps, source.live_maps)

    once = Watch([str(folder)])
    read = once.poll()
    assert once.done
    many, one = _steps(polled), _steps(read)
    assert len(many) == STEPS
    assert many == one  # every field: times, duration, each range's work

    out = tmp_path / "analysis"
    proc = subprocess.run(_cli("analyze", folder, "-o", out), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    pace = {(p["RankName"], p["Step"]): p["Duration"] for p in pq.read_table(out / "pace.parquet").to_pylist()}
    assert pace == {key: o["duration_ns"] for key, o in many.items()}
    # the steps in the order they came, each once
    assert [o["step"] for o in polled if o["kind"] == "step"] == list(range(STEPS))

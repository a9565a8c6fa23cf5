"""nvtx-tf merge keeps a forked child linked to its parent when their clocks differ (issue 20.11).

A forked child's segment header names its parent by (parent_pid, parent_process_start_ns):
the reader resolves the string ids the child inherited through it. merge moves every
process onto one reference clock, one shift per clock; parent_process_start_ns is a time
of the parent's clock, so it must move with the parent's shift, whatever the child's is.
tests/native/fork_time_namespace.c records it for real: the child runs in a time namespace
whose monotonic clock is OFFSET ahead of its parent's, and names a registered string only
its parent defined (registered past the registry's cap, so never re-emitted).
"""

from __future__ import annotations

import subprocess

import pytest

from nvtx_plugins_tf.recorder import load
from nvtx_plugins_tf.recorder import merge as merge_mod


def record(c_sample, recorder_build, recorder_env, record_dir, offset_ns):
    env = recorder_env(record_dir, library=recorder_build, NVTX_TF_RECORDER_CLOCK="monotonic")
    program = c_sample("fork_time_namespace")
    proc = subprocess.run([str(program), str(offset_ns)], env=env, capture_output=True, text=True, timeout=120)
    if proc.returncode == 77:
        pytest.skip("time namespaces unavailable (root and Linux >= 5.6 needed)")
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)


def names_by_payload(rec, pid):
    return sorted((r.payload, r.message) for r in rec.events if r.pid == pid and r.payload is not None)


# 1.25 ms: just past merge's same-clock tolerance (SAME_CLOCK_NS, 1 ms), two clocks;
# 1000 s: two far apart clocks
@pytest.mark.parametrize("offset_ns", [1_250_000, 1000 * 10**9])
def test_merged_child_keeps_its_parent_link_across_clocks(c_sample, recorder_build, recorder_env, tmp_path, offset_ns):
    record_dir = tmp_path / "rec.nvtxrec"
    record(c_sample, recorder_build, recorder_env, record_dir, offset_ns)
    rec = load(record_dir)
    parent = rec.find("parent")[0].pid
    child = rec.find("child")[0].pid
    assert names_by_payload(rec, child) == [(2, "inherited")], "the recording itself must resolve it"

    manifest = merge_mod.merge([record_dir], tmp_path / "merged")
    assert len(manifest["sources"][0]["clock_offsets_ns"]) == 2, manifest  # two clocks really
    merged = load(tmp_path / "merged")
    assert not merged.damage.damaged, merged.damage.describe()
    assert names_by_payload(merged, parent) == [(1, "inherited")]
    assert names_by_payload(merged, child) == [(2, "inherited")]
    # each process kept its own clock's alignment: the child's events after the fork
    fork_order = [r.message for r in sorted(merged.events, key=lambda r: r.start_ns)]
    assert fork_order.index("parent") < fork_order.index("child") < fork_order.index("parent after")

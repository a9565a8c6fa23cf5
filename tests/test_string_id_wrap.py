"""String ids past the end of their range (issue 20.10).

The recorder hands out 32-bit string ids; a long job interning unique messages used to run
the process-wide counter around and give new texts the ids of live ones (registered strings
the program still holds, definitions earlier in the same segment), so events took other
events' names. tests/native/string_id_wrap.c moves the counter near its end through the
recorder's test control function, records past it with two threads, keeps using registered
strings (one past the registry's cap, never re-emitted), holds a range open across the end and
forks a child that uses them too. Every event's payload says what its name must be.
"""

from __future__ import annotations

import subprocess

from nvtx_plugins_tf.recorder import load
from nvtx_plugins_tf.recorder.recording.reader import segment_files

COUNT = 3000  # unique messages per thread, past the end of the range


def expected_name(payload: int) -> str:
    if payload < 10_000_000:
        return f"m{payload}"
    if payload < 20_000_000:
        return f"reg{payload - 10_000_000}"
    if payload < 30_000_000:
        return "outer"
    return f"late{payload - 30_000_000}"


def run(c_sample, recorder_build, recorder_env, record_dir, *args):
    env = recorder_env(record_dir, library=recorder_build)
    program = c_sample("string_id_wrap")
    proc = subprocess.run([str(program), *map(str, args)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    return load(record_dir)


def test_every_event_keeps_its_name_past_the_end_of_the_string_ids(c_sample, recorder_build, recorder_env, tmp_path):
    record_dir = tmp_path / "rec"
    # 1000 ids left: the end comes while both threads record
    rec = run(c_sample, recorder_build, recorder_env, record_dir, 1000, COUNT)
    assert not rec.damage.damaged, rec.damage.describe()
    wrong = [(r.message, r.payload) for r in rec.events if r.message != expected_name(r.payload)]
    assert wrong == [], f"{len(wrong)} of {len(rec.events)} events misnamed, e.g. {wrong[:5]}"
    parent = min(rec.processes)
    child = max(rec.processes)
    assert parent != child
    in_parent = [r for r in rec.events if r.pid == parent]
    # 10 + 4 early events, 2 x COUNT marks and COUNT / 16 registered ranges per thread, 10 late
    # marks and "outer"
    assert len(in_parent) == 14 + 2 * (COUNT + -(-COUNT // 16)) + 11
    assert len(rec.find("outer")) == 1 and not rec.find("outer")[0].unclosed
    assert sorted(r.message for r in rec.events if r.pid == child) == ["m9000000", "reg0", "reg1", "reg2", "reg3"]
    # the registered strings were used on both sides of the end
    for k in range(4):
        assert len(rec.find(f"reg{k}")) >= 2 * (COUNT // 64) + 2
    # the end of the range was crossed: the parent's ids started over in a new segment
    parent_segments = [p for p in segment_files(record_dir) if p.name.startswith(f"{parent}-")]
    assert len(parent_segments) >= 2


def test_registrations_past_the_last_lasting_id_get_null_handles(c_sample, recorder_build, recorder_env, tmp_path):
    """Registered string ids are never reused: once they are all taken, a registration gets a
    null handle and its event has no message -- never another string's."""
    rec = run(c_sample, recorder_build, recorder_env, tmp_path / "rec", 1000, 100, 2)
    late = sorted((r.payload, r.message) for r in rec.events if r.payload >= 30_000_000)
    assert late == [(30_000_000, "late0"), (30_000_001, "late1"), (30_000_002, "")]
    assert all(r.message == expected_name(r.payload) for r in rec.events if r.payload < 30_000_000)
    assert not rec.damage.damaged, rec.damage.describe()


def test_restarting_string_ids_is_race_free_under_tsan(tsan_build, c_sample, recorder_env, tmp_path):
    """Two threads intern past the end of the segment ids, under ThreadSanitizer: the restart
    (a new segment, the counter's new cycle) races no thread that takes or writes an id."""
    from conftest import TSAN_OPTIONS

    lib, _ = tsan_build
    program = c_sample("string_id_wrap", "-O1", "-g", "-fsanitize=thread")
    env = recorder_env(tmp_path / "rec", library=lib, TSAN_OPTIONS=TSAN_OPTIONS)
    proc = subprocess.run([str(program), "1000", "3000"], env=env, capture_output=True, text=True, timeout=300)
    assert "ThreadSanitizer" not in proc.stderr, proc.stderr[-4000:]
    assert proc.returncode == 0, proc.stderr[-2000:]
    rec = load(tmp_path / "rec")
    assert all(r.message == expected_name(r.payload) for r in rec.events)
    assert len(rec.events) > 6000

"""The recorder's clock (cc_ops/recorder/clock.h): recorded timestamps are CLOCK_MONOTONIC
nanoseconds whichever source stamps them, the TSC (converted) or clock_gettime, and never
go backwards in a thread.

A C program (tests/native/clock_sample.c) reads clock_gettime(CLOCK_MONOTONIC) right before
and right after each push and pop; the recorded timestamps must lie between the two reads:
exactly with clock_gettime, within TSC_TOLERANCE_NS with the TSC (the conversion is anchored
on (TSC, clock_gettime) pairs, each off by up to half the time of one clock_gettime call;
measured here: within the brackets, mean offset ~2 ns). Pauses between the pairs make the
clock re-anchor while busy and after idling for longer than its 10 ms span. Each test runs
with NVTX_TF_RECORDER_CLOCK forced to tsc and to monotonic; the tsc runs skip when the
machine's TSC is not invariant (the recorder then uses clock_gettime whatever is asked).
"""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import _child_env, _recorder_env
from native.segment_oracle import decode_dir

from nvtx_plugins_tf._native_libs import RECORDER_CLOCK_ENV as CLOCK_ENV

# How far a TSC timestamp may fall outside its clock_gettime brackets: a few microseconds,
# far above the error measured (tens of ns) and far below anything the readers compare.
TSC_TOLERANCE_NS = 5_000
K_PUSH, K_POP = 1, 2  # record_format.h kRangePush, kRangePop


@pytest.fixture(scope="module")
def sample(c_sample) -> Path:
    return c_sample("clock_sample")


def _cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _kernel_clocksource() -> str:
    try:
        return Path("/sys/devices/system/clocksource/clocksource0/current_clocksource").read_text().strip()
    except OSError:
        return ""


def _invariant_tsc() -> bool:
    # The kernel sets both flags from CPUID 0x80000007 EDX bit 8, the bit the recorder reads.
    return platform.machine() in ("x86_64", "i686") and {"constant_tsc", "nonstop_tsc"} <= _cpu_flags()


def _run(exe: Path, lib: Path, record_dir: Path, clock: str | None, *args: str) -> tuple[str, list[str]]:
    env = _recorder_env(record_dir, library=lib, **({CLOCK_ENV: clock} if clock is not None else {}))
    proc = subprocess.run([str(exe), *args], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("clock="), lines[:1]
    source = lines[0].split("=", 1)[1]
    if clock == "tsc" and source != "tsc":
        pytest.skip(
            f"the recorder does not use the TSC here (no invariant TSC: CPUID 0x80000007 EDX bit 8); got {source}"
        )
    if clock in ("tsc", "monotonic"):
        assert source == clock
    return source, lines[1:]


@pytest.fixture(params=["tsc", "monotonic"])
def clock(request) -> str:
    if request.param == "tsc" and not _invariant_tsc():
        pytest.skip("no invariant TSC on this machine (/proc/cpuinfo lacks constant_tsc/nonstop_tsc or not x86)")
    return request.param


def test_auto_uses_the_tsc_only_where_the_kernel_does(recorder_build, sample, tmp_path):
    source, _ = _run(sample, recorder_build, tmp_path / "rec", None, "compare", "10")
    expected = "tsc" if _invariant_tsc() and _kernel_clocksource() == "tsc" else "monotonic"
    assert source == expected, (_cpu_flags() & {"constant_tsc", "nonstop_tsc"}, _kernel_clocksource())
    assert _run(sample, recorder_build, tmp_path / "rec2", "auto", "compare", "10")[0] == expected
    assert _run(sample, recorder_build, tmp_path / "rec3", "bogus", "compare", "10")[0] == expected


def test_recorded_timestamps_lie_between_clock_gettime_reads(recorder_build, sample, tmp_path, clock):
    pairs = 1500
    record_dir = tmp_path / "rec"
    _, lines = _run(sample, recorder_build, record_dir, clock, "brackets", str(pairs))
    brackets = [tuple(int(v) for v in line.split()[1:]) for line in lines if line.startswith("b ")]
    assert len(brackets) == pairs
    [seg] = decode_dir(record_dir)
    main = [r for r in seg.events if r.kind in (K_PUSH, K_POP) and r.text != "thread"]
    # Program order: push, pop, push, pop, ...
    assert [r.kind for r in main] == [K_PUSH, K_POP] * pairs
    tol = TSC_TOLERANCE_NS if clock == "tsc" else 0
    outside = []
    worst = 0
    for i, (a, b, c, d) in enumerate(brackets):
        push, pop = main[2 * i].ts, main[2 * i + 1].ts
        for ts, lo, hi in ((push, a, b), (pop, c, d)):
            off = lo - ts if ts < lo else ts - hi if ts > hi else 0
            worst = max(worst, off)
            if off > tol:
                outside.append((i, lo, ts, hi))
    assert not outside, f"{len(outside)} timestamps outside their brackets by more than {tol} ns: {outside[:5]}"
    print(f"{clock}: worst distance outside the brackets {worst} ns over {2 * pairs} timestamps")


def test_recorder_clock_reads_agree_with_clock_gettime(recorder_build, sample, tmp_path, clock):
    _, lines = _run(sample, recorder_build, tmp_path / "rec", clock, "compare", "200000")
    out = dict(line.split("=", 1) for line in lines)
    tol = TSC_TOLERANCE_NS if clock == "tsc" else 0
    assert int(out["max_before_ns"]) <= tol and int(out["max_after_ns"]) <= tol, out


def test_per_thread_timestamps_never_decrease(recorder_build, sample, tmp_path, clock):
    threads, pairs = 4, 300_000
    record_dir = tmp_path / "rec"
    _run(sample, recorder_build, record_dir, clock, "threads", str(threads), str(pairs))
    [seg] = decode_dir(record_dir)
    by_tid: dict[int, list[int]] = {}
    for r in seg.events:
        if r.text == "thread" or r.kind == K_POP:
            by_tid.setdefault(r.tid, []).append(r.ts)
    counts = sorted(len(v) for v in by_tid.values())
    assert counts[-threads:] == [2 * pairs] * threads
    for tid, stamps in by_tid.items():
        back = [(i, stamps[i - 1], stamps[i]) for i in range(1, len(stamps)) if stamps[i] < stamps[i - 1]]
        assert not back, f"thread {tid}: {len(back)} timestamps before their predecessor, first {back[:3]}"


def test_forked_child_continues_the_parents_clock(recorder_build, tmp_path, clock):
    """A forked child keeps the parent's calibration: its events follow the parent's and
    lie between its own clock_gettime reads."""
    code = f"""
import ctypes, os, time
lib = ctypes.CDLL({str(recorder_build)!r})
lib.nvtx_recorder_now_ns.restype = ctypes.c_uint64
lib.nvtx_recorder_clock_source.restype = ctypes.c_char_p
lib.nvtx_recorder_set_output_dir({str(tmp_path / "rec").encode()!r})
before = lib.nvtx_recorder_now_ns()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    worst = 0
    for _ in range(20000):
        a = time.monotonic_ns(); t = lib.nvtx_recorder_now_ns(); b = time.monotonic_ns()
        worst = max(worst, a - t, t - b)
        if t < before:
            worst = 1 << 62
    os.write(w, str(worst).encode())
    os._exit(0)
os.close(w)
os.waitpid(pid, 0)
print(lib.nvtx_recorder_clock_source().decode(), os.read(r, 100).decode())
"""
    env = _child_env(**{CLOCK_ENV: clock})
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    source, worst = proc.stdout.split()
    if clock == "tsc" and source != "tsc":
        pytest.skip(f"the recorder does not use the TSC here; got {source}")
    assert source == clock
    # time.monotonic_ns() is clock_gettime(CLOCK_MONOTONIC) too.
    assert int(worst) <= (TSC_TOLERANCE_NS if clock == "tsc" else 0), worst

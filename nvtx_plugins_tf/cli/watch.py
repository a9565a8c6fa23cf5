"""``watch``: a running job's step pace across ranks, live, from its recordings as they are
written (no code inside the job). The work is :mod:`nvtx_plugins_tf.recorder.watch`'s; here,
flags, the loop and exit codes.

Runs until interrupted (SIGINT: 130, SIGTERM: 143, after the lines already printed), or with
``--until-done`` until every rank's writer has ended (0; 6 when a recording was damaged, its
intact events counted). ``--scheduler ADDR``: the recordings read on a Dask cluster's workers
(:mod:`nvtx_plugins_tf.recorder.watch.hosts`), its address checked as ``analyze``'s (2, or 15).
"""

from __future__ import annotations

import math
import signal
import time

from ._common import (
    EXIT_DAMAGED,
    EXIT_DASK_UNAVAILABLE,
    EXIT_INPUT_NOT_FOUND,
    EXIT_USAGE,
    EXIT_WATCH_VIEW_UNAVAILABLE,
    CliError,
    Terminated,
    signal_words,
    warn,
)

#: what to install for the terminal view
WATCH_EXTRA = "nvtx_plugins_tf[watch]"
#: what to install for --web
WEB_EXTRA = "nvtx_plugins_tf[web]"


def _within(low: float, high: float, what: str = "seconds"):
    """argparse type: a number from ``low`` to ``high`` (``what`` it is, in the error)."""

    def parse(value: str) -> float:
        import argparse

        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not low <= number <= high:  # (nan, inf: out of range too)
            raise argparse.ArgumentTypeError(f"{value!r}: {what}, {low:g} to {high:g}")
        return number

    return parse


def _web_address(text: str) -> tuple[str, int]:
    """argparse type of ``--web``: ``[HOST:]PORT`` (``[::1]:PORT`` for an IPv6 address) as
    ``(host, port)``; 127.0.0.1 when no HOST is given."""
    import argparse

    host, colon, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not colon:
        host = "127.0.0.1"
    try:
        number = int(port) if port.isdigit() else -1
    except ValueError:
        number = -1
    if not 0 <= number <= 65535 or not host.strip() or not host.isprintable():
        raise argparse.ArgumentTypeError(
            f"{text!r}: give [HOST:]PORT, a PORT from 0 to 65535 (0: any free port), HOST a name or address"
        )
    return host, number


def cmd_watch(args) -> int:
    try:
        return _watch(args)
    except (Terminated, KeyboardInterrupt) as exc:  # (watch writes no file: nothing to remove)
        signo = exc.signo if isinstance(exc, Terminated) else signal.SIGINT
        raise CliError(f"{signal_words(signo)}; stopped watching", 128 + signo) from None


def _watch(args) -> int:
    import contextlib

    if args.scheduler is not None:
        from ..recorder.analysis import check_scheduler_address

        try:
            check_scheduler_address(args.scheduler)
        except ValueError as exc:
            raise CliError(f"--scheduler {exc}", EXIT_USAGE) from None
    with contextlib.ExitStack() as stack:
        return _watch_in(args, stack)


def _tailer(args, stack):
    """``--scheduler``: the readers on the cluster's workers (:mod:`..recorder.watch.hosts`),
    released and the client closed when ``stack`` closes; else None (read here)."""
    if args.scheduler is None:
        return None
    from ..recorder.analysis import EngineUnavailable
    from ..recorder.analysis.engines import scheduler_client
    from ..recorder.watch.hosts import HostsTailer

    try:
        client = stack.enter_context(scheduler_client(args.scheduler))
        tailer = HostsTailer(client, args.inputs, args.step, args.cpu_budget)
    except EngineUnavailable as exc:
        raise CliError(str(exc), EXIT_DASK_UNAVAILABLE) from None
    stack.callback(tailer.close)
    return tailer


def _watch_in(args, stack) -> int:
    from ..recorder.watch import Watch, WatchInputError

    if args.step is not None and not args.step.partition("@")[0].strip():
        raise CliError(f"--step {args.step!r}: give the step range's name, NAME or NAME@DOMAIN", EXIT_USAGE)
    if args.web is not None:
        from ..recorder.watch.web import bokeh_available

        if not bokeh_available():
            raise CliError(f"watch --web needs bokeh: pip install '{WEB_EXTRA}'", EXIT_WATCH_VIEW_UNAVAILABLE)
    elif not args.json:
        from ..recorder.watch.view import rich_available

        if not rich_available():
            raise CliError(
                f"the terminal view needs rich: pip install '{WATCH_EXTRA}'; or use --json (no extra needed)",
                EXIT_WATCH_VIEW_UNAVAILABLE,
            )
    try:
        watch = Watch(args.inputs, step=args.step, stale_after=args.stale_after, tailer=_tailer(args, stack))
    except WatchInputError as exc:
        raise CliError(str(exc), EXIT_INPUT_NOT_FOUND) from exc
    if args.web is not None:
        from ._watch_web import serve

        with serve(args, watch) as state:

            def feed(objects: list[dict]) -> None:
                if args.json:
                    _print_json(objects)
                state.add(objects)
                state.done(_ended(watch))

            _loop(watch, args, feed)
    elif args.json:
        _loop(watch, args, _print_json)
    else:
        from ..recorder.watch.view import Board, live

        board = Board()
        with live(board, title=f"nvtx-tf watch ({len(args.inputs)} input(s), every {args.interval:g} s)") as screen:

            def show(objects: list[dict]) -> None:
                for obj in objects:
                    board.add(obj)
                if [board.done(name) for name in _ended(watch)].count(True) or objects:
                    screen.update()

            _loop(watch, args, show)
    if watch.notes:  # (each said as it came)
        raise CliError(
            f"{len(watch.notes)} recording(s) damaged or left out (said above); the steps shown are the rest's",
            EXIT_DAMAGED,
        )
    return 0


def _ended(watch) -> list[str]:
    """The ranks whose writers ended."""
    ended = [s for s in watch.tailer.sources.values() if s.state == "ended"]
    return [watch.steps.name_of(r) for s in ended for r in s.results]


def _print_json(objects: list[dict]) -> None:
    from ..recorder.watch.jsonl import json_line

    for obj in objects:
        print(json_line(obj), flush=True)


def _loop(watch, args, show) -> None:
    """Poll every ``--interval`` seconds (from the start of the last poll; later when a poll's
    CPU exceeds ``--cpu-budget``: :func:`..recorder.watch.session.pause`) and show what came;
    with ``--until-done``, end after the poll that found every rank's writer ended."""
    from ..recorder.watch.session import pause

    noted = 0
    while True:
        began, cpu = time.monotonic(), time.process_time()
        show(watch.poll())
        for line in watch.notes[noted:]:
            warn(line)
        noted = len(watch.notes)
        if args.until_done and watch.done:
            return
        time.sleep(round(pause(args.interval, args.cpu_budget, time.monotonic() - began, time.process_time() - cpu), 6))


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "watch",
        help="a running job's step pace across ranks, live, and the range behind a slow rank",
        description=(
            "Follow recordings while they are written (PREFIX.nvtxrec, or folders of them: a folder's new recordings "
            "join as their ranks start) and show each rank's steps as they end: a table per rank (last, median, p95 "
            "step time, the slowest range) and a line for each rank that lags chronically, naming the range behind "
            "it (a CUSUM rule: docs/watch.md). --json prints one JSON object a line instead: each step of each rank "
            "(on one wall clock, as analyze places them: the same durations, to the ns), each straggler named, "
            "each rank gone stale. Runs until interrupted, or with --until-done until every rank's writer ended."
        ),
    )
    p.add_argument("inputs", nargs="+", metavar="REC", help="recordings (PREFIX.nvtxrec) or folders of them")
    p.add_argument(
        "--step",
        metavar="NAME[@DOMAIN]",
        help="the step ranges: message NAME or 'NAME N' (default: as analyze chooses, the Keras callback's "
        "'batch N', else 'step N')",
    )
    p.add_argument(
        "--interval", type=_within(0.05, 60), default=0.5, metavar="SECONDS", help="time between reads (0.5)"
    )
    p.add_argument("--json", action="store_true", help="one JSON object a line (docs/watch.md), no table")
    p.add_argument(
        "--web",
        type=_web_address,
        metavar="[HOST:]PORT",
        help="serve the view as a page instead (a Bokeh server: the 'web' extra) on HOST (127.0.0.1 by default) "
        "and PORT (0: any free port); click a heatmap cell for that rank-step's ranges. With --json, the lines "
        "go on to stdout and the URL to stderr",
    )
    p.add_argument("--until-done", action="store_true", help="end once every rank's writer has ended")
    p.add_argument(
        "--scheduler",
        metavar="ADDR",
        help="read the recordings on the workers of the running Dask scheduler at ADDR (tcp://HOST:PORT; one "
        "worker a host, the 'dask' extra): each REC is a path on the workers' hosts, each host's ranks read where "
        "they are written and sent as a small summary per rank and step (docs/watch.md)",
    )
    p.add_argument(
        "--cpu-budget",
        type=_within(0.01, 64, "a share of one core"),
        default=0.15,
        metavar="SHARE",
        help="the share of one core the reads may take (0.15): a live rank is read in parts, but a recording read "
        "whole costs more as the run grows, and then the reads space out past --interval to stay within it",
    )
    p.add_argument(
        "--stale-after",
        type=_within(0.1, 86400),
        default=30.0,
        metavar="SECONDS",
        help="a rank that writes no range for this long is stale (30); a killed one is at once",
    )
    p.set_defaults(func=cmd_watch)


def add_record_flag(parser) -> None:
    """``record --watch`` (the flag on ``record``'s parser)."""
    parser.add_argument(
        "--watch",
        action="store_true",
        help="show the command's steps live while it runs (nvtx-tf watch PREFIX.nvtxrec --until-done beside it; "
        "needs the 'watch' extra)",
    )


class RecordWatcher:
    """``record --watch``: ``nvtx-tf watch RAW_DIR --until-done`` in a process of its own beside
    the command (not in the command's process group: a terminal's Ctrl-C reaches the command,
    and ``watch`` ends as the command's writers end). ``wanted`` False: does nothing."""

    #: seconds ``record`` waits for ``watch``'s last read once the command ended
    GRACE = 5.0

    def __init__(self, wanted: bool):
        self.wanted, self.proc = wanted, None
        if wanted:
            from ..recorder.watch.view import rich_available

            if not rich_available():
                raise CliError(f"record --watch needs rich: pip install '{WATCH_EXTRA}'", EXIT_WATCH_VIEW_UNAVAILABLE)

    def after(self, first, raw_dir, *args):
        """``on_started`` of the command: ``first(raw_dir, *args)``, then :meth:`start`."""
        return lambda: (first(raw_dir, *args), self.start(raw_dir))

    def start(self, raw_dir) -> None:
        """Start watching ``raw_dir`` (the command runs)."""
        if self.wanted:
            import subprocess
            import sys

            argv = [sys.executable, "-m", "nvtx_plugins_tf", "watch", str(raw_dir), "--until-done"]
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL)

    def finish(self) -> None:
        """The command ended: ``watch`` ends after its last read (killed after :data:`GRACE` s
        when it cannot end by itself: a command that recorded nothing)."""
        if self.proc is None:
            return
        import subprocess

        try:
            self.proc.wait(timeout=self.GRACE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

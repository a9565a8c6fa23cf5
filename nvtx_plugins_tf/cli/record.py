"""``record``: run a command with the recorder attached, then write the exports."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from pathlib import Path

from .._native_libs import (
    CAPTURE_RANGE_END_ENV,
    CAPTURE_RANGE_ENV,
    DOMAIN_EXCLUDE_ENV,
    DOMAIN_INCLUDE_ENV,
    INJECTION_ENV,
    KERAS_LAYERS_ENV,
    RECORD_DIR_ENV,
    TF_OP_RANGES_ENV,
)
from .._paths import PACKED_SEGMENT_SUFFIX, RECORDING_SUFFIX, SEGMENT_SUFFIX, longest_output_name, recording_stem
from ._common import (
    EXIT_DAMAGED,
    EXIT_NO_CAPTURE_WINDOW,
    EXIT_NO_EVENTS,
    EXIT_OUTPUT_BUSY,
    EXIT_OUTPUT_NOT_WRITABLE,
    EXIT_RECORDER_UNAVAILABLE,
    EXIT_USAGE,
    CliError,
    Terminated,
    export_types,
    warn,
)
from ._exports import damaged_line, write_exports
from .watch import RecordWatcher, add_record_flag


def _output_prefix(value: str) -> Path:
    """PREFIX of ``-o``: a usage error (exit 2) when it names no file (``""``, ``/``, ``out/``)."""
    prefix = Path(value)
    name = recording_stem(prefix)
    if not value or value.endswith(("/", os.sep)) or name in ("", ".", ".."):
        raise CliError(f"-o {value!r}: PREFIX must name the output files, e.g. -o out/run", EXIT_USAGE)
    limit = _name_max(prefix.parent)
    if longest_output_name(name) > limit:
        room = limit - (longest_output_name(name) - len(os.fsencode(name)))
        raise CliError(
            f"-o: the name {name[:24]!r}... ({len(os.fsencode(name))} bytes) is too long for the files made from it; "
            f"at most {room} bytes here",
            EXIT_USAGE,
        )
    return prefix.with_name(name)


def _name_max(directory: Path) -> int:
    """The longest file name the file system of ``directory`` (or of its nearest existing
    parent) takes; 255 when it cannot be told."""
    existing = directory if str(directory) else Path(".")
    while not os.path.isdir(existing) and existing != existing.parent:
        existing = existing.parent
    try:
        return os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _prepare_output_dir(directory: Path) -> None:
    """Create the output folder (with its parents) or say why it cannot be (exit 3)."""
    directory = directory if str(directory) else Path(".")
    existing = directory
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    if os.path.lexists(existing) and not existing.is_dir():
        what = "a file" if existing.is_file() else "not a directory"
        raise CliError(f"cannot create output directory {directory}: {existing} is {what}", EXIT_OUTPUT_NOT_WRITABLE)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"cannot create output directory {directory}: {exc.strerror}", EXIT_OUTPUT_NOT_WRITABLE) from exc
    from .._native_libs import is_writable

    # (tried, not os.access: root passes os.access on /sys, /proc and read-only mounts)
    if not os.access(directory, os.W_OK | os.X_OK) or not is_writable(directory):
        raise CliError(
            f"output directory {directory} is not writable; choose another -o PREFIX", EXIT_OUTPUT_NOT_WRITABLE
        )


def _png_window(value: str) -> str:
    """argparse type of --png-window: 'all' or A:B with non-negative integers."""
    import re

    match = re.fullmatch(r"(\d*):(\d*)", value)
    if match and match[1] and match[2] and int(match[1]) > int(match[2]):
        raise argparse.ArgumentTypeError(f"{value!r}: the first step is after the last; expected A:B with A <= B")
    if value == "all" or match:
        return value
    raise argparse.ArgumentTypeError(f"{value!r}: expected A:B (steps, 0-based) or 'all'")


def capture_range(value: str) -> str:
    """argparse type of --capture-range: ``NAME``, ``NAME@DOMAIN`` or ``NAME@*`` (as nsys's
    --nvtx-capture; the domain is after the last ``@``)."""
    name, at, domain = value.rpartition("@") if "@" in value else (value, "", "")
    if not name or (at and not domain):
        raise argparse.ArgumentTypeError(f"{value!r}: expected NAME, NAME@DOMAIN or NAME@* (NAME not empty)")
    return value


def capture_range_end(value: str) -> str:
    """argparse type of --capture-range-end: stop, none, repeat or repeat:N (N >= 1)."""
    import re

    if value in ("stop", "none", "repeat") or re.fullmatch(r"repeat:[1-9]\d*", value):
        return value
    if value in ("stop-shutdown",) or value.startswith("repeat-shutdown"):
        raise argparse.ArgumentTypeError(f"{value!r}: record never ends the command; use stop or repeat:N")
    raise argparse.ArgumentTypeError(f"{value!r}: expected stop, none, repeat or repeat:N (N >= 1)")


def domain_list(value: str) -> str:
    """argparse type of --nvtx-domain-include/-exclude: a comma list (nsys syntax: ``default``
    is the default domain, ``\\`` escapes a comma or a domain literally named default)."""
    if not value.replace("\\,", "x").strip(", "):
        raise argparse.ArgumentTypeError(f"{value!r}: expected a comma-separated list of NVTX domains")
    return value


def _segments(raw_dir: Path) -> dict[str, tuple[int, int]]:
    """Segment files of ``raw_dir``: name -> (device, inode)."""
    found = {}
    for seg in [*raw_dir.glob("*" + SEGMENT_SUFFIX), *raw_dir.glob("*" + PACKED_SEGMENT_SUFFIX)]:
        with contextlib.suppress(OSError):
            st = seg.lstat()
            found[seg.name] = (st.st_dev, st.st_ino)
    return found


def _remove_segments(raw_dir: Path, old: dict[str, tuple[int, int]]) -> None:
    """Remove the segments in ``old`` that are still the same files (a new one that took an old name is kept)."""
    for name, ident in old.items():
        path = raw_dir / name
        with contextlib.suppress(OSError):
            st = path.lstat()
            if (st.st_dev, st.st_ino) == ident:
                path.unlink()


def _pack(raw_dir: Path, live_check: bool = True) -> None:
    """Pack the recording's closed segments (recording/packed.py): 0.5-3 bytes an event on
    disk instead of 8-16. A segment that cannot be packed stays raw, and is read as well."""
    from ..recorder.recording.packed import pack_recording

    try:
        pack_recording(raw_dir, live_check)
    except OSError as exc:
        warn(f"the recording {raw_dir} stays unpacked (it reads all the same): {exc.strerror or exc}")
    except (Terminated, KeyboardInterrupt) as exc:
        raise _interrupted(exc, f"packing {raw_dir}: the exports are written, the recording is intact") from None


_IGNORED_WHILE_PACKING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


class _Packer:
    """Packs the recording in a forked child while this process writes the exports (pyarrow's
    import and the packing on the other core). The child keeps the raw segments (the exports
    read them); :meth:`finish` removes those whose packed twin is whole. Signals are this
    process's to handle: :meth:`abort` ends the child, and the recording stays readable
    (raw, or packed where the child got to)."""

    def __init__(self, raw_dir: Path):
        self.raw_dir = raw_dir
        self.pid = os.fork()
        if self.pid == 0:  # the child: never returns into the caller's code
            code = 1
            try:
                for sig in _IGNORED_WHILE_PACKING:
                    signal.signal(sig, signal.SIG_IGN)
                from ..recorder.recording.packed import pack_recording

                pack_recording(raw_dir, keep_raw=True)
                code = 0
            except OSError as exc:
                code = exc.errno if exc.errno and 1 < exc.errno < 126 else 1  # (told by finish())
            finally:
                os._exit(code)

    def _reap(self) -> int:
        if not self.pid:
            return 0
        status = os.waitpid(self.pid, 0)[1]  # (a signal here: abort() kills and reaps it)
        self.pid = 0
        return os.waitstatus_to_exitcode(status)

    def finish(self) -> None:
        from ..recorder.recording.packed import remove_packed_raw

        try:
            status = self._reap()
        except (Terminated, KeyboardInterrupt) as exc:
            self.abort()
            raise _interrupted(
                exc, f"packing {self.raw_dir}: the exports are written, the recording is intact"
            ) from None
        if status != 0:
            why = os.strerror(status) if 1 < status < 126 else f"its packer ended with status {status}"
            warn(f"the recording {self.raw_dir} stays unpacked (it reads all the same): {why}")
        remove_packed_raw(self.raw_dir)

    def abort(self) -> None:
        from ..recorder.recording.packed import remove_packed_raw

        if self.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self._reap()
        with contextlib.suppress(OSError):
            remove_packed_raw(self.raw_dir)


def _restamp_exports(raw_dir: Path, prefix: Path) -> None:
    """Packing changed the recording's folder after the exports were written. Tools that
    take an export as current only while it is newer than its recording by ctime (nsys's
    recipes: ``getctime(report) < getctime(export)``) would then think every export stale:
    give the exports (and a Parquet directory's files) a newer ctime, their mtime kept. The
    kernel's file times move in ticks of a few ms: again until the exports are newer."""
    from ..recorder.outputs import every_output_path

    paths = every_output_path(prefix)
    for _ in range(50):
        folder_changed = raw_dir.stat().st_ctime_ns
        oldest = None
        for path in {p for p in paths if p.exists()}:
            for item in [path, *(path.rglob("*") if path.is_dir() else [])]:
                with contextlib.suppress(OSError):
                    st = item.lstat()
                    os.utime(item, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
                    changed = item.lstat().st_ctime_ns
                    oldest = changed if oldest is None else min(oldest, changed)
        if oldest is None or oldest > folder_changed:
            return
        time.sleep(0.002)


def _interrupted(exc: BaseException, what: str) -> CliError:
    """The error of a SIGTERM/SIGHUP (``Terminated``) or Ctrl-C while doing ``what``."""
    how = exc.name if isinstance(exc, Terminated) else "SIGINT"
    return CliError(f"{how} while {what}", exc.code if isinstance(exc, Terminated) else 128 + 2)


def _lock_prefix(raw_dir: Path, prefix: Path):
    """Holds ``raw_dir/.lock`` (flock) for this record's life, so that a second record with the
    same -o PREFIX refuses (exit 13) instead of deleting this one's segments when it starts.
    The kernel releases the lock when the process ends, however it ends: a killed record
    never blocks the next one. Returns the open lock file (keep it referenced)."""
    import fcntl

    path = raw_dir / ".lock"
    try:
        lock = open(path, "a+")  # (not inherited by the command: Python opens non-inheritable)
    except OSError as exc:
        raise CliError(f"cannot create {path}: {exc.strerror}", EXIT_OUTPUT_NOT_WRITABLE) from exc
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "?"
        lock.close()
        raise CliError(
            f"-o {prefix}: another nvtx-tf record (pid {holder}) is recording to {raw_dir}; "
            "wait for it to end or choose another -o PREFIX",
            EXIT_OUTPUT_BUSY,
        ) from None
    lock.seek(0)
    lock.truncate()
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    return lock


def cmd_record(args) -> int:
    # Nothing heavy (numpy, the reader) is imported before the command ends: libraries
    # that start threads would create threads without our signal mask.
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise CliError("record: no command given (usage: record -o PREFIX -- COMMAND [ARGS...])", EXIT_USAGE)
    prefix = _output_prefix(args.output)
    if args.nvtx_domain_include is not None and args.nvtx_domain_exclude is not None:
        raise CliError("--nvtx-domain-include and --nvtx-domain-exclude cannot be used together", EXIT_USAGE)
    if args.capture_range_end is not None and args.capture_range is None:
        raise CliError("--capture-range-end needs --capture-range NAME[@DOMAIN]", EXIT_USAGE)
    # Everything that can fail is checked before anything is created or removed.
    from ._child import _resolve_command, _run_forwarding_signals  # (subprocess: imported by this command only)

    _resolve_command(command)
    watcher = RecordWatcher(args.watch)
    try:
        from .._native_libs import native_library

        library = native_library("recorder")
    except ImportError as exc:
        raise CliError(str(exc).replace("nvtx_plugins_tf: ", ""), EXIT_RECORDER_UNAVAILABLE) from exc
    _prepare_output_dir(prefix.parent)
    raw_dir = prefix.with_name(prefix.name + RECORDING_SUFFIX)
    try:
        raw_dir.mkdir(mode=0o700, exist_ok=True)  # recordings hold command lines
    except OSError as exc:
        raise CliError(f"cannot create {raw_dir}: {exc.strerror}", EXIT_OUTPUT_NOT_WRITABLE) from exc
    if not raw_dir.is_dir():
        raise CliError(f"cannot create {raw_dir}: a file is in the way", EXIT_OUTPUT_NOT_WRITABLE)
    lock = _lock_prefix(raw_dir, prefix)  # held until this function returns (and the process ends)
    # The previous recording's segments go only once the new command runs.
    old_segments = _segments(raw_dir)
    env = dict(os.environ)
    env[INJECTION_ENV] = str(library)
    env[RECORD_DIR_ENV] = str(raw_dir.resolve())
    for name in (CAPTURE_RANGE_ENV, CAPTURE_RANGE_END_ENV, DOMAIN_INCLUDE_ENV, DOMAIN_EXCLUDE_ENV):
        env.pop(name, None)  # only this command line decides what is written
    if args.capture_range is not None:
        env[CAPTURE_RANGE_ENV] = args.capture_range
        env[CAPTURE_RANGE_END_ENV] = args.capture_range_end or "stop"
    if args.nvtx_domain_include is not None:
        env[DOMAIN_INCLUDE_ENV] = args.nvtx_domain_include
    if args.nvtx_domain_exclude is not None:
        env[DOMAIN_EXCLUDE_ENV] = args.nvtx_domain_exclude
    if args.keras_layers or args.tf_ops:
        site = str(Path(__file__).resolve().parent.parent / "_site")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (site, env.get("PYTHONPATH", "")) if p)
    if args.keras_layers:
        env[KERAS_LAYERS_ENV] = "1"
    if args.tf_ops:
        env[TF_OP_RANGES_ENV] = "1"
    sys.stdout.flush()
    status = _run_forwarding_signals(command, env, on_started=watcher.after(_remove_segments, raw_dir, old_segments))
    watcher.finish()
    code = 128 - status if status < 0 else status
    packer = _Packer(raw_dir)
    try:
        events, damage = write_exports(
            raw_dir, prefix, args.png or args.png_window is not None, args.png_window or "1:", types=args.export
        )
    except (Terminated, KeyboardInterrupt) as exc:
        packer.abort()
        what = f"exporting: no export written, the recording {raw_dir} is intact (nvtx-tf report {prefix})"
        raise _interrupted(exc, what) from None
    except BaseException:
        packer.abort()
        raise
    packer.finish()
    _restamp_exports(raw_dir, prefix)
    if events == 0 and not damage.damaged and args.capture_range is not None:
        # (the range that opens a window is written: no event means no window)
        message = f"--capture-range {args.capture_range}: no such range opened a capture window, nothing recorded"
        if code != 0:
            warn(message)
            return code
        raise CliError(message, EXIT_NO_CAPTURE_WINDOW)
    if events == 0 and not damage.damaged:  # (all events dropped, e.g. a full disk, is damage)
        if code != 0:
            warn(f"no NVTX events recorded; {command[0]} exited with status {code}")
            return code
        raise CliError(
            f"no NVTX events recorded in {raw_dir} (does the command make NVTX calls? was {INJECTION_ENV} overridden?)",
            EXIT_NO_EVENTS,
        )
    if damage.damaged:
        message = damaged_line(raw_dir, damage)
        if code != 0:
            warn(message)
            return code
        raise CliError(message, EXIT_DAMAGED)
    lock.close()
    return code


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "record",
        help="run a command with the NVTX recorder attached; write PREFIX.json, PREFIX.sqlite",
        description="Run COMMAND with the NVTX recorder attached (all its processes record into "
        "PREFIX.nvtxrec/, which is kept), then write PREFIX.json (Perfetto / chrome://tracing), "
        "PREFIX.sqlite (Nsight Systems schema) and print the range summary. Exits with the "
        "command's exit code (128+N if killed by signal N).",
    )
    p.add_argument("-o", "--output", required=True, metavar="PREFIX", help="output prefix")
    p.add_argument("--png", action="store_true", help="also draw PREFIX.png (needs matplotlib)")
    p.add_argument(
        "--export",
        type=export_types,
        default=None,
        metavar="TYPES",
        help="the exports to write, comma-separated: sqlite (PREFIX.sqlite), json (PREFIX.json), parquetdir "
        "(PREFIX_pqtdir/), arrow (PREFIX.arrow), arrowdir (PREFIX_arwdir/) (default: json,sqlite); "
        "`nvtx-tf export` writes more later",
    )
    p.add_argument(
        "--png-window",
        metavar="STEPS",
        type=_png_window,
        default=None,
        help="steps drawn in PREFIX.png: A:B (0-based, either side may be empty) or 'all'; "
        "default 1: (without the first step, where TensorFlow traces); implies --png",
    )
    p.add_argument(
        "--keras-layers",
        action="store_true",
        help="annotate every layer of every Keras model (forward and backward ranges) in an unmodified Python script",
    )
    p.add_argument(
        "--tf-ops",
        action="store_true",
        help="switch on TensorFlow's own per-op NVTX ranges (domain TSL) in the command's Pythons",
    )
    p.add_argument(
        "--capture-range",
        metavar="NAME[@DOMAIN]",
        type=capture_range,
        help="write only the events inside the windows this NVTX range opens and closes (push/pop or "
        "start/end, message equal to NAME; NAME alone: default domain, NAME@*: any domain), as nsys's "
        "--capture-range=nvtx --nvtx-capture=NAME[@DOMAIN]",
    )
    p.add_argument(
        "--capture-range-end",
        metavar="stop|none|repeat[:N]",
        type=capture_range_end,
        help="after the window closes: stop (default, one window), repeat (every window of the range), "
        "repeat:N (the first N), none (the window stays open); as nsys's --capture-range-end",
    )
    p.add_argument(
        "--nvtx-domain-include",
        metavar="DOMAINS",
        type=domain_list,
        help="record only these NVTX domains (comma list, 'default' is the default domain; as nsys's)",
    )
    p.add_argument(
        "--nvtx-domain-exclude",
        metavar="DOMAINS",
        type=domain_list,
        help="record every NVTX domain but these (comma list, 'default' is the default domain; as nsys's); "
        "NVTX gets a disabled domain handle for them",
    )
    add_record_flag(p)
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]")
    p.set_defaults(func=cmd_record)

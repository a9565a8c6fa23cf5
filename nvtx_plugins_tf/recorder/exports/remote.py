"""Sinks run elsewhere, fed the batches of one :func:`~.one_pass.feed` (nothing is decoded twice).

:class:`ChildSink` runs a sink in a forked child process, fed over a pipe (the batches and
the new entries of the reader's tables); :class:`ThreadSink` runs one in a thread of this
process, fed over queues, nothing pickled. On a machine with two cores or more, ``record``
(:mod:`..outputs`) writes the SQLite file in a child and the other formats in threads while
it decodes.
"""

from __future__ import annotations

import os
import pickle
import queue
import signal
import threading
from types import SimpleNamespace

from .one_pass import Sink

__all__ = ["ChildSink", "ThreadSink", "CHILD_QUEUE"]

CHILD_QUEUE = 4  # batches a remote sink holds at most, besides the one it works on


def _records(items, fields) -> list:
    """ctypes records (Domain, ThreadName) as plain picklable objects with the same fields."""
    return [SimpleNamespace(**{f: getattr(item, f) for f in fields}) for item in items]


_DOMAIN_FIELDS = ("pid", "create_ns", "local_id", "name")
_THREAD_NAME_FIELDS = ("pid", "tid", "name", "override")


class _Tables:
    """A :class:`~..recording.reader.RecordingReader` as a sink in a child process sees it: the tables the
    parent sent. During the batches: ``strings()``, ``domain_table()``, ``domain_names()``,
    ``category_names()``, ``origin_ns``, ``path``, ``estimated_events()``; at ``finish()``
    everything else."""

    def __init__(self, path, origin_ns: int, estimated_events: int = 0):
        self.path, self.origin_ns = path, origin_ns
        self._estimated_events = estimated_events
        self._strings: list[str] = []
        self._domains: list = []
        self._domain_names: list[str] = []
        self._categories: dict = {}
        self._final: dict = {}

    def estimated_events(self) -> int:
        return self._estimated_events

    def strings(self) -> list[str]:
        return self._strings

    def string(self, index: int) -> str:
        return self._strings[index]

    def domain_table(self) -> list:
        return self._domains

    def domain_names(self) -> list[str]:
        return self._domain_names

    def category_names(self) -> dict:
        return self._categories

    def category_name(self, domain: int, category: int):
        return self.category_names().get((domain, category))

    def thread_name_records(self) -> list:
        return self._final["thread_name_records"]

    @property
    def thread_names(self) -> dict:
        return self._final["thread_names"]

    @property
    def processes(self) -> dict:
        return self._final["processes"]

    def damage(self):
        return self._final["damage"]


def _send_error(conn, exc: BaseException) -> None:
    try:
        pickle.dumps(exc)
    except Exception:  # noqa: BLE001 - sent as text instead
        exc = RuntimeError(f"{type(exc).__name__}: {exc}")
    try:
        conn.send(("error", exc))
    except OSError:
        pass


def _serve(tables: _Tables, factory, args, kwargs, get, reply, reply_error) -> None:
    """The remote side of a :class:`_Remote` sink: make the sink on ``tables``, then apply the
    messages ``get()`` returns (None or anything but "add"/"finish": the caller went away)
    until "finish"; answers through ``reply`` (("ok", value)) and ``reply_error``."""
    try:
        sink = factory(tables, *args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - the caller raises it
        reply_error(exc)
        return
    reply(("ok", None))
    error = None
    try:
        with sink:  # left unfinished (the caller aborted or went away, an error): discarded
            try:
                while True:
                    message = get()
                    if message is None or message[0] not in ("add", "finish"):
                        return
                    op, payload, strings, domains, categories = message
                    tables._strings.extend(strings)
                    if domains is not None:
                        tables._domains, tables._domain_names = domains
                    if categories is not None:
                        tables._categories = categories
                    if op == "add":
                        sink.add(payload)
                    else:
                        tables._final = payload
                        result = sink.finish()
                        reply(("ok", result))
                        return
            except BaseException as exc:  # noqa: BLE001 - the caller raises it
                error = exc
    except BaseException as exc:  # noqa: BLE001 - discarding failed too (a full disk): the first error counts
        error = error or exc
    if error is not None:
        reply_error(error)  # (once the partial output is gone)


def _child_main(conn, path, origin_ns, estimated_events, factory, args, kwargs) -> None:
    # A thread receives the next batches while the sink works: the parent runs up to
    # CHILD_QUEUE batches ahead.
    messages = queue.Queue(maxsize=CHILD_QUEUE)

    def receive():
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                message = None
            messages.put(message)
            if message is None or message[0] != "add":
                return

    threading.Thread(target=receive, daemon=True).start()
    tables = _Tables(path, origin_ns, estimated_events)
    _serve(tables, factory, args, kwargs, messages.get, conn.send, lambda exc: _send_error(conn, exc))


_IGNORED_IN_CHILD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


class _Remote(Sink):
    """A sink run elsewhere (:class:`ChildSink`: a forked process; :class:`ThreadSink`: a
    thread), fed over a connection: each batch with the new entries of the reader's tables
    (the remote side reads a :class:`_Tables`, never the reader), the final tables at
    :meth:`start_finish`. Errors on the remote side are raised here; ``finish()`` returns
    the remote sink's result."""

    def _connected(self, reader, conn) -> None:
        self.reader, self._conn = reader, conn
        self._strings_sent = 0
        self._domains_sent = -1
        self._categories_sent: dict | None = None
        self._finishing = False
        try:
            self._receive()
        except BaseException:
            self._abort()
            raise

    def _send(self, message) -> None:
        try:
            if self._conn.poll():  # the child reported an error
                self._receive()
            self._conn.send(message)
        except (BrokenPipeError, ConnectionResetError, EOFError):
            self._receive()  # its error, if it sent one
            raise RuntimeError("nvtx_plugins_tf: an export's writer stopped reading") from None

    def _receive(self):
        try:
            status, value = self._conn.recv()
        except (EOFError, OSError):
            raise RuntimeError("nvtx_plugins_tf: an export's writer ended unexpectedly") from None
        if status == "error":
            raise value
        return value

    def _new_strings(self) -> list[str]:
        strings = self.reader.strings()
        new = strings[self._strings_sent :]
        self._strings_sent = len(strings)
        return new

    def _new_domains(self):
        """(domain table, domain names) if the table grew since it was sent, else None."""
        table = self.reader.domain_table()
        if len(table) == self._domains_sent:
            return None
        self._domains_sent = len(table)
        return _records(table, _DOMAIN_FIELDS), list(self.reader.domain_names())

    def _new_categories(self):
        """The category names if any was named since they were sent, else None."""
        names = self.reader.category_names()
        if names == self._categories_sent:
            return None
        self._categories_sent = names
        return names

    def _tables(self) -> tuple:
        return self._new_strings(), self._new_domains(), self._new_categories()

    def add(self, rows) -> None:
        self._send(("add", rows, *self._tables()))

    def start_finish(self) -> None:
        if self._finishing:
            return
        self._finishing = True
        reader = self.reader
        final = {
            "thread_name_records": _records(reader.thread_name_records(), _THREAD_NAME_FIELDS),
            "thread_names": reader.thread_names,
            "processes": dict(reader.processes),
            "damage": reader.damage(),
        }
        self._domains_sent = -1  # all of it: an entry may have changed (its creation time, read later)
        self._send(("finish", final, *self._tables()))

    def _finish(self):
        self.start_finish()
        try:
            return self._receive()
        finally:
            self._wait()

    def _abort(self) -> None:
        self._wait()

    def _wait(self) -> None:
        raise NotImplementedError


class ChildSink(_Remote):
    """``factory(reader, *args, **kwargs)`` (a sink class) run by a forked child process:
    each batch and the new entries of the reader's tables go to it over a pipe (bounded: at
    most CHILD_QUEUE batches ahead of it), its work runs on another core. Errors in the child (making the sink
    included) are raised here; ``finish()`` returns the child sink's result."""

    def __init__(self, reader, factory, *args, **kwargs):
        import multiprocessing.connection

        ours, theirs = multiprocessing.connection.Pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the caller's code, flushes nothing of its buffers
            code = 1
            try:
                ours.close()
                # Signals are the parent's to handle (a process group's Ctrl-C or kill reaches both):
                # the child ends when the pipe closes, after removing its partial output.
                for sig in _IGNORED_IN_CHILD:
                    signal.signal(sig, signal.SIG_IGN)
                estimate = reader.estimated_events() if hasattr(reader, "estimated_events") else 0
                _child_main(theirs, reader.path, reader.origin_ns, estimate, factory, args, kwargs)
                code = 0
            finally:
                os._exit(code)
        theirs.close()
        self._pid = pid
        self._connected(reader, ours)

    def _wait(self) -> None:
        """Close the pipe (an unfinished child then discards its output) and reap the child."""
        self._conn.close()
        if self._pid:
            pid, self._pid = self._pid, 0
            os.waitpid(pid, 0)


class _QueueEnd:
    """One end of a :class:`ThreadSink`'s connection: the interface of a pipe's
    (``send``, ``recv``, ``poll``, ``close``) over two queues, broken when the thread ended."""

    def __init__(self, incoming: queue.Queue, outgoing: queue.Queue, thread: threading.Thread):
        self._in, self._out, self._thread = incoming, outgoing, thread

    def send(self, message) -> None:
        while True:
            try:
                return self._out.put(message, timeout=0.05)
            except queue.Full:
                if not self._thread.is_alive():
                    raise BrokenPipeError from None

    def recv(self):
        while True:
            try:
                return self._in.get(timeout=0.05)
            except queue.Empty:
                if not self._thread.is_alive() and self._in.empty():
                    raise EOFError from None

    def poll(self) -> bool:
        return not self._in.empty()

    def close(self) -> None:
        try:
            self.send(None)  # (an unfinished sink then discards its output)
        except BrokenPipeError:
            pass


class ThreadSink(_Remote):
    """``factory(reader, *args, **kwargs)`` (a sink class) run by a thread of this process,
    fed like a :class:`ChildSink` (at most CHILD_QUEUE batches ahead; the sink sees the tables
    sent, never the reader, whose decoder the caller's thread goes on using), with nothing
    pickled: for sinks whose work mostly releases the GIL (native formatting, writing files,
    pyarrow), which then runs on another core."""

    def __init__(self, reader, factory, *args, **kwargs):
        to_thread, from_thread = queue.Queue(maxsize=CHILD_QUEUE), queue.Queue()
        estimate = reader.estimated_events() if hasattr(reader, "estimated_events") else 0
        tables = _Tables(reader.path, reader.origin_ns, estimate)
        self._thread = threading.Thread(
            target=_serve,
            args=(tables, factory, args, kwargs, to_thread.get, from_thread.put,
                  lambda exc: from_thread.put(("error", exc))),
            name=f"nvtx-tf {getattr(factory, '__name__', 'sink')}",
            daemon=True,
        )  # fmt: skip
        self._thread.start()
        self._connected(reader, _QueueEnd(from_thread, to_thread, self._thread))

    def _wait(self) -> None:
        """Tell the thread the batches are over (an unfinished sink then discards its output)
        and wait for it."""
        self._conn.close()
        self._thread.join()

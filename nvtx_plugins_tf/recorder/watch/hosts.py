"""``watch --scheduler ADDR``: the ranks of many hosts, each host's read where it runs.

On each Dask worker of the scheduler (one a host: ``dask worker --nworkers 1``), a
:class:`HostReader` (a Dask actor) tails the recordings the command line names *as paths on
that host* with the local :class:`.tail.Tailer` (a relative path: from the worker's working
directory; a path the worker does not see: fine, it is another host's) and, at each poll of
the client, answers with what changed since its last answer: the ranks it met (file, pid,
name, clock offset), the range labels it met, its recordings' states, and each new step of
each rank on the rank's own clock with its ranges' work (:meth:`.steps.StepAssembler.raw_steps`)
- never the mapped columns. The answer is compact JSON compressed by zlib (the wire format,
docs/watch.md); a rank-step costs some tens of bytes.

The client (:class:`HostsTailer`, in the place of a :class:`.tail.Tailer`) places the steps on
one wall clock as a local ``watch`` does (:meth:`.steps.StepAssembler.placed`, in the order
met), so the ``--json`` lines, the terminal view and ``--web`` are the local ones. A recording
met by two readers (a shared file system, two workers of one host) is known by its path and
its writer's pid: the first reader to report it keeps it, the other's copy is left aside.
"""

from __future__ import annotations

import json
import socket
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from ..analysis.engines import EngineUnavailable
from ..analysis.mapper import StepSpec
from .steps import StepAssembler, StepRecord
from .tail import Tailer, WatchInputError, expand_recordings

__all__ = ["HostReader", "HostsTailer", "RemoteRank", "RemoteSource", "decode", "encode"]

#: seconds a new worker has to start its reader (else it is named and not asked again)
JOIN_WAIT_S = 30.0


def encode(message: dict) -> bytes:
    """A reader's answer on the wire: compact ASCII JSON, zlib-compressed (level 1)."""
    return zlib.compress(json.dumps(message, separators=(",", ":")).encode("ascii"), 1)


def decode(data: bytes) -> dict:
    """The answer :func:`encode` made."""
    return json.loads(zlib.decompress(data))


class HostReader:
    """The reader of one host (a Dask actor on its worker): ``values`` the REC paths (on this
    host), ``step`` the step ranges' ``NAME[@DOMAIN]`` (None: as ``analyze`` chooses),
    ``budget`` the share of one core its reads may take (a poll sooner than that allows
    answers with no new read)."""

    def __init__(self, values: list[str], step: str | None = None, budget: float = 0.15):
        self.values = list(values)
        self.spec = StepSpec.parse(step) if step else None
        self.budget = budget
        self.host = socket.gethostname()
        self.tailer = Tailer([], self.spec)
        self.cursor = StepAssembler()
        self._ranks: dict[tuple[str, int], int] = {}
        self._labels: dict[str, int] = {}
        self._said: dict[str, tuple] = {}
        self._next_read = 0.0

    def seen(self) -> dict[str, str]:
        """Per REC value, why this host does not see it ("" when it does)."""
        out = {}
        for value in self.values:
            try:
                expand_recordings([value])
                out[value] = ""
            except WatchInputError as exc:
                out[value] = str(exc)
        return out

    def poll(self) -> bytes:
        """Read the recordings again (within the CPU budget) and answer with what changed since
        the last answer (:func:`encode`d): ``h`` this host; ``r`` ranks met ``[id, file, pid,
        name, clock offset]``; ``l`` labels met ``[id, label]``; ``s`` recordings whose state
        changed ``[path, state, left out, error, ranges changed, [rank ids], {rank id: damage}]``;
        ``t`` new steps ``[rank id, step, start, duration, label id, ns, ...]`` (own clock)."""
        out: dict = {"h": self.host, "r": [], "l": [], "s": [], "t": []}
        now = time.monotonic()
        if now < self._next_read:
            return encode(out)
        # (the values this host sees now: a folder made later joins, one removed is skipped)
        self.tailer.values = [v for v, why in self.seen().items() if not why]
        cpu = time.process_time()
        sources = self.tailer.poll()
        spent = time.process_time() - cpu
        self._next_read = now + spent / self.budget
        for source in sources:
            ids = []
            for result in source.results:
                ids.append(self._rank_id(result, out))
                for record in self.cursor.raw_steps(result):
                    row = [ids[-1], record.step, record.start_ns, record.duration_ns]
                    for label, ns in record.ranges.items():
                        row += [self._label_id(label, out), ns]
                    out["t"].append(row)
            damage = {str(i): r.damage for i, r in zip(ids, source.results) if r.damage}
            said = (source.state, source.left_out, source.error, source.changed_at, tuple(ids), tuple(damage.items()))
            if self._said.get(str(source.path)) != said:
                self._said[str(source.path)] = said
                changed = source.changed_at >= now  # (its ranges changed at this read)
                out["s"].append([str(source.path), source.state, source.left_out, source.error, changed, ids, damage])
        return encode(out)

    def _rank_id(self, result, out: dict) -> int:
        key = (result.file, result.pid)
        if key not in self._ranks:
            self._ranks[key] = len(self._ranks)
            out["r"].append([self._ranks[key], result.file, result.pid, result.name, result.clock_offset])
        return self._ranks[key]

    def _label_id(self, label: str, out: dict) -> int:
        if label not in self._labels:
            self._labels[label] = len(self._labels)
            out["l"].append([self._labels[label], label])
        return self._labels[label]


@dataclass
class RemoteRank:
    """One rank read on a host: what :meth:`.steps.StepAssembler.placed` needs of it, its
    ``damage``, and its steps received and not taken yet."""

    file: str
    pid: int
    name: str
    clock_offset: int | None
    damage: str = ""
    pending: list[StepRecord] = field(default_factory=list)

    def take(self) -> list[StepRecord]:
        """The steps received since the last take (own clock)."""
        out, self.pending = self.pending, []
        return out


@dataclass
class RemoteSource:
    """One recording read on a host, as :class:`.tail.RankSource` shows one to
    :class:`.session.Watch`: ``path`` (on ``host``), ``results`` (its ranks), ``state``,
    ``changed_at`` (this process's ``time.monotonic``), ``error``, ``left_out``."""

    path: Path
    host: str
    results: list[RemoteRank] = field(default_factory=list)
    state: str = "starting"
    changed_at: float = field(default_factory=time.monotonic)
    error: str = ""
    left_out: bool = False

    @property
    def done(self) -> bool:
        """Its writers have ended and it was read after they did (or could not be)."""
        return self.left_out or self.state in ("ended", "lost")


class HostsTailer:
    """The recordings named by ``values`` on every worker of the Dask ``client``'s cluster,
    read by one :class:`HostReader` a worker (workers that join later get theirs); in the
    place of a :class:`.tail.Tailer`. Raises :class:`.tail.WatchInputError` when no worker
    sees a value, :class:`..analysis.engines.EngineUnavailable` when no worker could start a
    reader. ``received``: bytes of answers received; ``steps``: rank-steps received."""

    def __init__(self, client, values: list[str], step: str | None = None, budget: float = 0.15):
        self.client, self.values, self.step, self.budget = client, list(values), step, budget
        self.readers: dict[str, object] = {}
        self._futures: list = []
        self._ranks: dict[str, dict[int, RemoteRank]] = {}  # worker -> its reader's rank id -> rank
        self._labels: dict[str, dict[int, str]] = {}
        self._all: dict[tuple[str, str], RemoteSource] = {}
        self._owner: dict[tuple[str, int], str] = {}  # (file, pid) -> the worker whose copy is kept
        self.notes: list[str] = []
        self._gone: set[str] = set()
        self.received = self.steps = 0
        self._join_workers()
        if not self.readers:
            raise EngineUnavailable(f"no Dask worker could start a reader: {'; '.join(self.notes)}")
        seen = [r.seen() for r in self.readers.values()]
        answers = [s.result(timeout=JOIN_WAIT_S) for s in seen]
        for value in self.values:
            if all(a[value] for a in answers):
                why = answers[0][value]
                raise WatchInputError(f"no Dask worker sees {value} ({len(answers)} asked; the first: {why})")

    def _join_workers(self) -> None:
        """A reader on each worker that has none (a worker gone is not asked again)."""
        workers = sorted(self.client.scheduler_info(n_workers=-1)["workers"])
        for worker in workers:
            if worker not in self.readers and worker not in self._gone:
                future = self.client.submit(
                    HostReader, self.values, self.step, self.budget,
                    actor=True, workers=[worker], allow_other_workers=False, pure=False,
                )  # fmt: skip
                self._futures.append(future)
                try:
                    self.readers[worker] = future.result(timeout=JOIN_WAIT_S)
                except Exception as exc:  # noqa: BLE001 - a worker leaving meanwhile: named, not raised
                    self._gone.add(worker)
                    self.notes.append(f"the Dask worker {worker} could not start a reader ({type(exc).__name__})")
                    continue
                self._ranks[worker], self._labels[worker] = {}, {}

    @property
    def sources(self) -> dict[tuple[str, str], RemoteSource]:
        """The recordings kept (a copy left aside is not), by (worker, path)."""
        return {k: s for k, s in self._all.items() if self._kept(k[0], s)}

    def _kept(self, worker: str, source: RemoteSource) -> bool:
        return not source.results or any(self._owner.get((r.file, r.pid)) == worker for r in source.results)

    def poll(self) -> list[RemoteSource]:
        """Every reader's answer (asked at once, awaited in turn); returns the recordings kept.
        A reader whose worker left: its recordings not done are left out (``error`` says why)."""
        self._join_workers()
        asked = {}
        for worker, reader in list(self.readers.items()):
            try:
                asked[worker] = reader.poll()
            except Exception as exc:  # noqa: BLE001 - a worker gone, its actor lost: named, not raised
                self._lost(worker, exc)
        for worker, future in asked.items():
            try:
                data = future.result()
            except Exception as exc:  # noqa: BLE001 - (the same, found while it answered)
                self._lost(worker, exc)
                continue
            self.received += len(data)
            self._apply(worker, decode(data))
        return list(self.sources.values())

    def _lost(self, worker: str, exc: Exception) -> None:
        del self.readers[worker]
        self._gone.add(worker)
        for (w, _), source in self._all.items():  # (each named by the session, once: left out)
            if w == worker and not source.done:
                source.left_out, source.error = True, f"its Dask worker {worker} is gone ({type(exc).__name__})"

    def _apply(self, worker: str, message: dict) -> None:
        ranks, labels = self._ranks[worker], self._labels[worker]
        for rid, file, pid, name, offset in message["r"]:
            ranks[rid] = RemoteRank(file, pid, name, offset)
            self._owner.setdefault((file, pid), worker)
        for lid, label in message["l"]:
            labels[lid] = label
        now = time.monotonic()
        for path, state, left_out, error, changed, ids, damage in message["s"]:
            key = (worker, path)
            source = self._all.setdefault(key, RemoteSource(Path(path), message["h"]))
            source.state, source.left_out, source.error = state, left_out, error
            source.results = [ranks[i] for i in ids]
            for i, text in damage.items():
                ranks[int(i)].damage = text
            if changed:
                source.changed_at = now
        for row in message["t"]:
            rank = ranks[row[0]]
            if self._owner.get((rank.file, rank.pid)) != worker:
                continue  # (another reader's copy is kept)
            start, duration = row[2], row[3]
            work = {labels[row[k]]: row[k + 1] for k in range(4, len(row), 2)}
            rank.pending.append(StepRecord("", row[1], start, start + duration, duration, work))
            self.steps += 1

    def take(self, rank: RemoteRank) -> list[StepRecord]:
        """The steps of ``rank`` received and not taken yet (own clock)."""
        return rank.take()

    @property
    def all_done(self) -> bool:
        """Every recording kept has a writer that has ended, and was read after it did."""
        kept = self.sources
        return bool(kept) and all(s.done for s in kept.values())

    def close(self) -> None:
        """Release the readers (the cluster forgets the actors: their workers delete them)."""
        futures, self._futures, self.readers = self._futures, [], {}
        for future in futures:
            try:
                future.release()
            except Exception:  # noqa: BLE001,S110 - the client closing meanwhile
                pass

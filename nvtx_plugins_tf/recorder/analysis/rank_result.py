"""What the two implementations of the mapper share (:mod:`.mapper`, the numpy reference, and
:mod:`.native_mapper`): the result of one rank (:class:`RankResult`), which ranges are steps
(:class:`StepSpec`, :data:`DEFAULT_STEPS`), and the rules both name ranks, choose the step and
report an input's damage by."""

from __future__ import annotations

import contextlib
import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

#: the step ranges our Keras callback and session hooks emit, tried in this order
DEFAULT_STEPS = ("batch@Keras", "step@Keras", "step", "batch")


@dataclass(frozen=True)
class StepSpec:
    """Which ranges are steps: message ``name`` or ``name N`` (a number), in ``domain``
    (None: any; ``""``: the default domain)."""

    name: str
    domain: str | None = None

    @classmethod
    def parse(cls, text: str) -> "StepSpec":
        name, _, domain = text.partition("@")
        return cls(name.strip(), (domain.strip() if domain.strip() != "default" else "") if _ else None)

    def matches(self, domain: str, message: str) -> bool:
        if self.domain is not None and domain != self.domain:
            return False
        return message == self.name or bool(re.fullmatch(re.escape(self.name) + r" \d+", message))

    def mask(self, domains: list[str], messages: list[str]) -> np.ndarray:
        """:meth:`matches` of each ``(domains[i], messages[i])`` as a boolean array, in C-level
        passes over the lists (a name per step: 100,000 of them in a long job).

        >>> StepSpec.parse("step@train").mask(["train", "train", ""], ["step 7", "step x", "step 1"]).tolist()
        [True, False, False]
        """
        full = re.compile(re.escape(self.name) + r"(?: \d+)?").fullmatch
        hits = np.fromiter(map(bool, map(full, messages)), dtype=bool, count=len(messages))
        if self.domain is not None:
            hits &= np.fromiter(map(self.domain.__eq__, domains), dtype=bool, count=len(domains))
        return hits

    def __str__(self) -> str:
        return self.name if self.domain is None else f"{self.name}@{self.domain or 'default'}"


_I64 = np.zeros(0, dtype=np.int64)
_F64 = np.zeros(0, dtype=np.float64)


@dataclass
class RankResult:
    """One rank, as columns (a few hundred KB whatever its number of ranges: the reducer holds
    every rank's): ``name`` (the input's name without its suffix, with :pid when it holds
    several processes), ``file`` (the input), ``events`` (its ranges), ``open_ranges``.

    Per range name (``names``: (domain, message), one element of each array per name): the
    closed ranges' ``count``, ``sum``, ``min``, ``max``, ``m2`` (sum of squared deviations from
    the mean: merged exactly, Chan et al.), the exact quartiles ``q1``, ``median``, ``q3``
    (numpy's linear interpolation), and a quantile sketch (:mod:`.sketch`) as rows
    (``sketch_row``: the name's index, ``sketch_key``: the bucket, ``sketch_count``).

    The steps (the ranges named by ``step_name``), in start order: ``step_row`` (the name's
    index), ``step_start``/``step_end`` in wall-clock ns (session ns when the input has no
    wall-clock anchor: ``aligned`` False), ``clock_offset``: a recording's, what was added to
    its monotonic times to put them there (its clock's realtime - monotonic offset, by merge's
    rule: :class:`~..recording.clocks.Clocks`; None for an export, placed by its session's
    start, and without an anchor), and ``step_work[step, j]``: the ns of the step that
    the ranges named ``names[work_rows[j]]`` cover on this rank, any thread (their overlap
    with the step: a read that began before the step counts for the part the step waited;
    the step ranges and the ranges around the whole step, as the epoch's, left out), exclusive
    of their children's time (push/pop ranges nested in them on their thread), and
    ``step_incl``: the same, inclusive of it (a name nested in itself counted at each level,
    as a sum of durations does); only when the mapper is asked for it (``map_input``'s
    ``inclusive``, compare's), else empty (0 x 0). ``first_step``: the number of the first
    step in them (0; a live read's window of the steps, watch's: :mod:`.live_mapper`, the
    steps before it not held)."""

    name: str
    file: str
    pid: int
    events: int
    open_ranges: int
    names: list[tuple[str, str]] = field(default_factory=list)
    count: np.ndarray = field(default_factory=lambda: _I64)
    sum: np.ndarray = field(default_factory=lambda: _I64)
    min: np.ndarray = field(default_factory=lambda: _I64)
    max: np.ndarray = field(default_factory=lambda: _I64)
    m2: np.ndarray = field(default_factory=lambda: _F64)
    q1: np.ndarray = field(default_factory=lambda: _F64)
    median: np.ndarray = field(default_factory=lambda: _F64)
    q3: np.ndarray = field(default_factory=lambda: _F64)
    sketch_row: np.ndarray = field(default_factory=lambda: _I64)
    sketch_key: np.ndarray = field(default_factory=lambda: _I64)
    sketch_count: np.ndarray = field(default_factory=lambda: _I64)
    step_name: str = ""
    aligned: bool = True
    clock_offset: int | None = None
    step_row: np.ndarray = field(default_factory=lambda: _I64)
    step_start: np.ndarray = field(default_factory=lambda: _I64)
    step_end: np.ndarray = field(default_factory=lambda: _I64)
    work_rows: np.ndarray = field(default_factory=lambda: _I64)
    step_work: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    step_incl: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    first_step: int = 0
    damage: str = ""  #: the input's damage (a recording's reader's description), "" when intact

    @property
    def n_steps(self) -> int:
        return len(self.step_start)


def _split(label: str, domain: str) -> str:
    return label[len(domain) + 1 :] if domain and label.startswith(domain + ":") else label


def _choose_step(ranges, domains: list[str], messages: list[str], step: StepSpec | None) -> StepSpec | None:
    if step is not None:
        return step
    for text in DEFAULT_STEPS:
        spec = StepSpec.parse(text)
        if spec.mask(domains, messages).any():
            return spec
    return None


def _stem(path: Path) -> str:
    """The input's name (a recording's names its rank: rank3.nvtxrec)."""
    return path.name[: -len(".nvtxrec")] if path.name.endswith(".nvtxrec") else path.stem


def _check_readable(reader) -> None:
    """Raises ValueError (the first segment's error) when not one segment of the recording
    could be read: the input is then left out and named, not taken for one without ranges."""
    if not reader.processes and reader.errors:
        raise ValueError(f"no segment could be read: {reader.errors[0]}")


def _damage(reader) -> str:
    """The recording's damage in words ("" when intact), as ``report`` says it."""
    damage = reader.damage()
    return damage.describe() if damage.damaged else ""


_pool = threading.local()


def _release_arrow_memory() -> None:
    """Hand the memory pyarrow's pool kept from reading an export back to the system (its
    allocator keeps freed pages for reuse: about 100 MB an input, per mapper thread); not
    inside :func:`arrow_memory_kept`."""
    if getattr(_pool, "kept", False):
        return
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


@contextlib.contextmanager
def arrow_memory_kept():
    """In this thread, the inputs read inside leave pyarrow's pool its freed pages for the next
    one (handed back once, on leaving, where pyarrow is loaded): an embedded mapper thread
    reading inputs one after another, whose page faults a release per input made again (0.1-0.3
    s of system time at 8 parquetdirs of 83k steps, the same peak)."""
    _pool.kept = True
    try:
        yield
    finally:
        _pool.kept = False
        if "pyarrow" in sys.modules:
            _release_arrow_memory()

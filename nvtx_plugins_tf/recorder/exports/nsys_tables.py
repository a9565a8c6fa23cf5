"""The rows of Nsight Systems' export tables for a recording: what the SQLite file
(:mod:`.sqlite`) and the Parquet directory (:mod:`.parquet`) both hold, computed once here.
The schema is nsys 2024.2.3's (``EXPORT_SCHEMA_VERSION`` 3.11.1, :mod:`._nsys_schema`,
generated from a real export); nsys 2023.4's and 2022.4's reports and recipes read it too.

* ``NVTX_EVENTS``: one row per event (the writers turn the decoded rows into columns; the
  values are those below). ``eventType``: 34 mark, 59 push/pop range, 60 start/end range,
  75 domain creation (``text`` = domain name), 33 category name (``text`` = name,
  ``category`` = number), 39 thread name set by ``nvtxNameOsThread`` (``text`` = name,
  ``globalTid`` = the named thread): :func:`definition_events`. Messages as nsys stores
  them: a plain (ASCII/Unicode) message in ``text`` with ``textId`` NULL, a registered
  string (``nvtxDomainRegisterString``) in ``textId`` (-> ``StringIds``) with ``text``
  NULL; read both with ``coalesce((SELECT value FROM StringIds WHERE id = textId), text)``
  (nsys's order). ``endGlobalTid`` is set only for a start/end range that ended on another
  thread than it started (NULL otherwise, as in nsys). Payloads in the column of their
  type (:data:`PAYLOAD_COLUMNS`; extended payloads as JSON in ``jsonText``).
* ``StringIds`` (every string of the recording), ``ThreadNames`` (priority 0),
  ``PROCESSES`` (name = the process name of the recording, where nsys writes the
  executable's path for the profiled process), ``ANALYSIS_DETAILS``,
  ``TARGET_INFO_SESSION_START_TIME``, ``TARGET_INFO_SYSTEM_ENV`` (the host name only:
  :func:`system_env`): :func:`small_tables`.
* ``META_DATA_EXPORT`` (:func:`export_metadata`), ``META_DATA_CAPTURE``
  (:func:`capture_metadata`) and our own ``NVTX_TF_META_DATA`` (:func:`provenance`).

**Times** are nanoseconds relative to the session start, as in nsys: 0 is the start of the
earliest segment of the recording (the first process that loaded the recorder), whose
wall-clock time is ``TARGET_INFO_SESSION_START_TIME.utcEpochNs`` (from the CLOCK_REALTIME
anchor each segment header holds next to its CLOCK_MONOTONIC start; NULL when the recording
has none); no time is below 0 (the writers shift everything when an event precedes its
segment's header). The recorder's CLOCK_MONOTONIC value of 0 is ``NVTX_TF_META_DATA``
``timeOrigin_ns``. ``ANALYSIS_DETAILS``: ``startTime`` 0, ``stopTime`` = ``duration`` =
the last timestamp of the file.

**Ids**: ``globalTid = (1 << 48) | (pid << 24) | tid`` and ``globalPid = (1 << 48) |
(pid << 24)`` as nsys writes them (bit 48: nsys's VM id 1); decode with
``(globalTid >> 24) & 0xFFFFFF`` and ``globalTid & 0xFFFFFF``. ``domainId`` is the
process's own domain handle number, so domain names are looked up per process (as nsys's
reports do: eventType 75 rows with the same ``domainId`` and pid).

**Metadata**: ``META_DATA_EXPORT`` has nsys's keys in its order, with the values of the
nsys whose schema this is for the ones that describe nsys and its schema
(``EXPORT_PRODUCT_VERSION`` 2024.2.3.38, ``EXPORT_SCHEMA_VERSION`` 3.11.1 and its
``_MAJOR``/``_MINOR``/``_MICRO``/``_CKSUM``: tools read them to know the schema), this
export's values for the others (platform, time, host, user, input and output files --
nsys's own spelling ``EXPORT_PARAM_OUTUPT_FILE`` included -- and parameters), and no other
key: nsys's table stays nsys's. Ours are in a table of our own, ``NVTX_TF_META_DATA`` (name,
value; last in each export): ``exporter`` (``nvtx_plugins_tf``: who really wrote the
file), ``source``, ``timeOrigin_ns``, ``clock``, ``damagedChunks``, ``damagedSegments``.
``META_DATA_CAPTURE`` holds only those of nsys's keys whose value we know for the run:
the event type, the device (the recording's host name), the first process's command,
arguments and pid, and which traces were collected (NVTX only).

**Ranges still open when the recording ended** (the process was killed or never closed
them) keep ``end`` NULL. nsys closes such ranges at the end of the capture instead; we do
not, so that a range's duration is never made up and the open ones can be told apart
(our ``summary``/``report`` list them apart). nsys's own reports cope: ``nsys stats``
(``nvtx_sum``, ``nvtx_pushpop_trace`` ...) treat a NULL ``end`` as "until the last
timestamp", i.e. they show what nsys would have written.

What nsys writes and we cannot (the recording lacks it): one eventType 75 row per
``nvtxDomainCreate`` call (we write one per domain, at its first creation, on the
process's main thread), eventType 76 domain destruction rows, the time and thread of
category naming (33) and of ``nvtxNameOsThread`` (39) (we put them at the process's start
on its main thread, resp. the named thread), nsys's small per-session ``rangeId`` numbers
(ours are the recorder's ids), other processes of the system in ``PROCESSES``/
``ThreadNames``, thread priorities, ``TARGET_INFO_SYSTEM_ENV`` but the host name,
``ProcessStreams`` (the program's output), ``PROFILER_OVERHEAD`` (empty tables here).
"""

from __future__ import annotations

import datetime
import os
import platform
import socket
from pathlib import Path

from ..recording.model import (
    EVENT_CATEGORY,
    EVENT_DOMAIN_CREATE,
    EVENT_THREAD_NAME,
    PAYLOAD_DOUBLE,
    PAYLOAD_FLOAT,
    PAYLOAD_I32,
    PAYLOAD_I64,
    PAYLOAD_U32,
    PAYLOAD_U64,
    DamageReport,
)
from ..recording.reader import RecordingReader
from . import _nsys_schema

__all__ = [
    "SCHEMA_VERSION",
    "NSYS_VERSION",
    "GLOBAL_VID",
    "PAYLOAD_COLUMNS",
    "global_tid",
    "global_pid",
    "definition_events",
    "small_tables",
    "export_metadata",
    "capture_metadata",
    "provenance",
    "PROVENANCE_TABLE",
    "PROVENANCE_DDL",
    "session_start_utc",
    "anchor_process",
]

#: Our own table (name, value): who wrote the export and from what; nsys's tables stay nsys's.
PROVENANCE_TABLE = "NVTX_TF_META_DATA"
PROVENANCE_DDL = f"CREATE TABLE {PROVENANCE_TABLE} (name TEXT NOT NULL, value TEXT)"

SCHEMA_VERSION = _nsys_schema.SCHEMA_META["EXPORT_SCHEMA_VERSION"]
NSYS_VERSION = _nsys_schema.SCHEMA_META["EXPORT_PRODUCT_VERSION"]

#: nsys's VM id 1 in bits 48+ of every globalTid/globalPid/globalVid it writes.
GLOBAL_VID = 1 << 48

#: payload type -> the NVTX_EVENTS column of its value
PAYLOAD_COLUMNS = {
    PAYLOAD_U64: "uint64Value",
    PAYLOAD_I64: "int64Value",
    PAYLOAD_DOUBLE: "doubleValue",
    PAYLOAD_U32: "uint32Value",
    PAYLOAD_I32: "int32Value",
    PAYLOAD_FLOAT: "floatValue",
}


def global_tid(pid, tid):
    """nsys's globalTid: ``(1 << 48) | (pid << 24) | tid``, 24 bits each (numpy or int)."""
    return GLOBAL_VID | ((pid & 0xFFFFFF) << 24) | (tid & 0xFFFFFF)


def global_pid(pid):
    """nsys's globalPid: ``(1 << 48) | (pid << 24)``."""
    return GLOBAL_VID | ((pid & 0xFFFFFF) << 24)


def _thread_names(reader: RecordingReader) -> tuple[dict, set]:
    """{(pid, tid): string id of its name}, and the (pid, tid) named by nvtxNameOsThread."""
    names, overrides = {}, set()
    for t in reader.thread_name_records():
        names[(t.pid, t.tid)] = t.name
        if t.override:
            overrides.add((t.pid, t.tid))
    return names, overrides


def definition_events(reader: RecordingReader, origin: int) -> list[tuple]:
    """NVTX_EVENTS rows of the definitions (domains, category names, thread names set by
    ``nvtxNameOsThread``): ``(start, eventType, category, text, globalTid, domainId)``."""
    strings = reader.strings()
    domain_names = reader.domain_names()
    domains = reader.domain_table()

    def process_start(pid):
        return (reader.processes[pid].start_ns - origin) if pid in reader.processes else 0

    rows = []
    for index, d in enumerate(domains):
        if index == 0:
            continue
        start = (d.create_ns - origin) if d.create_ns else process_start(d.pid)
        rows.append((start, EVENT_DOMAIN_CREATE, None, domain_names[index], global_tid(d.pid, d.pid), d.local_id))
    for (dom, category), name in reader.category_names().items():
        d = domains[dom]
        pid = d.pid if dom else next(iter(reader.processes), 0)
        rows.append((process_start(pid), EVENT_CATEGORY, category, name, global_tid(pid, pid), d.local_id))
    names, overrides = _thread_names(reader)
    for pid, tid in sorted(overrides):
        rows.append((process_start(pid), EVENT_THREAD_NAME, None, strings[names[(pid, tid)]], global_tid(pid, tid), 0))
    return rows


def _iso(ns: int, tz) -> str:
    return datetime.datetime.fromtimestamp(ns / 1e9, tz).strftime("%Y-%m-%dT%H:%M:%S")


def anchor_process(reader: RecordingReader):
    """The process whose realtime anchor dates the session: the earliest that has one (None
    if none has)."""
    anchored = [p for p in reader.processes.values() if p.anchored]
    return min(anchored, key=lambda p: p.start_ns) if anchored else None


def session_start_utc(reader: RecordingReader, origin: int) -> int | None:
    """CLOCK_REALTIME (ns since the epoch) of the session start ``origin`` (CLOCK_MONOTONIC),
    from the anchor of :func:`anchor_process`."""
    first = anchor_process(reader)
    return None if first is None else first.start_realtime_ns - (first.start_ns - origin)


#: ``TARGET_INFO_SYSTEM_ENV``'s device state for a capture on the local machine, as nsys names it
LOCAL_DEVICE = "Local (CLI)"


def system_env(reader: RecordingReader) -> list[tuple]:
    """``TARGET_INFO_SYSTEM_ENV`` rows of what the recording knows of its machine: its
    ``Hostname`` (nsys's property 619; tools such as nsys2prv need it) and ``HasNvtxEvents``
    (809); none when the recorder wrote no host name. nsys's other 80-odd properties (CPU,
    OS, driver, its own capabilities) are not recorded."""
    first = min(reader.processes.values(), key=lambda p: p.start_ns, default=None)
    if first is None or not first.host:
        return []
    return [
        (GLOBAL_VID, LOCAL_DEVICE, "Hostname", 619, first.host),
        (GLOBAL_VID, LOCAL_DEVICE, "HasNvtxEvents", 809, "1"),
    ]


def small_tables(reader: RecordingReader, origin: int, stop_time: int) -> dict[str, list[tuple]]:
    """The rows (tuples in the table's column order) of ``StringIds``, ``ThreadNames``,
    ``PROCESSES``, ``ANALYSIS_DETAILS``, ``TARGET_INFO_SESSION_START_TIME`` and
    ``TARGET_INFO_SYSTEM_ENV``, where the last timestamp of NVTX_EVENTS is ``stop_time``."""
    names, _ = _thread_names(reader)
    utc = session_start_utc(reader, origin)
    return {
        "TARGET_INFO_SYSTEM_ENV": system_env(reader),
        "StringIds": list(enumerate(reader.strings())),
        "ThreadNames": [(name, 0, global_tid(pid, tid)) for (pid, tid), name in sorted(names.items())],
        "PROCESSES": [(global_pid(pid), pid, info.name) for pid, info in sorted(reader.processes.items())],
        "ANALYSIS_DETAILS": [(GLOBAL_VID, max(0, stop_time), 0, max(0, stop_time))],
        "TARGET_INFO_SESSION_START_TIME": [
            (utc, None if utc is None else _iso(utc, datetime.timezone.utc), None if utc is None else _iso(utc, None))
        ],
    }


def _platform() -> tuple[str, str]:
    machine = platform.machine().lower()
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)
    system = platform.system().lower()
    return (f"{system}-desktop" if arch == "x64" else f"{system}-{arch}"), arch


def _text(path) -> str:
    """A path as text a table can hold (UTF-8): a name that is no UTF-8 with U+FFFD for
    the bytes that are not."""
    return os.fsencode(path).decode("utf-8", errors="replace")


def export_metadata(
    reader: RecordingReader, output: Path, seconds: float, overwrite: bool = True
) -> list[tuple[str, str]]:
    """``META_DATA_EXPORT`` rows: nsys's keys in its order, nothing else (module docstring)."""
    now = datetime.datetime.now().astimezone()
    plat, arch = _platform()
    source, output = Path(reader.path), Path(output)
    values = dict(_nsys_schema.SCHEMA_META)
    values.update(
        {
            "EXPORT_PLATFORM": plat,
            "EXPORT_ARCH": arch,
            "EXPORT_TIME_UTC": now.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S"),
            "EXPORT_TIME_LOCAL": now.strftime("%Y-%m-%dT%H:%M:%S %z %Z"),
            "EXPORT_HOST": socket.gethostname(),
            "EXPORT_USER": os.environ.get("USER", ""),
            "EXPORT_PARAM_INPUT_FILE": _text(source.name),
            "EXPORT_PARAM_OUTUPT_FILE": _text(output.name),
            "EXPORT_PARAM_INPUT_PATH": _text(str(source)),
            "EXPORT_PARAM_OUTUPT_PATH": _text(str(output)),
            "EXPORT_PARAM_INPUT_PATH_ABS": _text(str(source.absolute())),
            "EXPORT_PARAM_OUTUPT_PATH_ABS": _text(str(output.absolute())),
            "EXPORT_PARAM_OVERWRITE": "true" if overwrite else "false",
            "EXPORT_PARAM_APPEND": "false",
            "EXPORT_PARAM_LAZY": "false",  # every table of the schema is created
            "EXPORT_PARAM_TIME_NORMALIZE": "false",
            "EXPORT_PARAM_TIME_SHIFT": "0",
            "EXPORT_PARAM_TABLES_TO_EXPORT": "",
            "EXPORT_PARAM_TIMES_TO_EXPORT": "",
            "EXPORT_CONFIG_TIME_SHIFT": "0",
            "EXPORT_TIME": f"{seconds:.2f} sec",
        }
    )
    return [(k, values[k]) for k in _nsys_schema.META_KEYS if k in values]


def provenance(reader: RecordingReader, damage: DamageReport, origin: int) -> list[tuple[str, str]]:
    """Rows of our own table :data:`PROVENANCE_TABLE` (module docstring)."""
    from ... import __version__ as version

    return [
        ("exporter", f"nvtx_plugins_tf {version}".strip()),
        ("source", _text(reader.path)),
        ("timeOrigin_ns", str(origin)),
        ("clock", "CLOCK_MONOTONIC"),
        ("damagedChunks", str(damage.damaged_chunks)),
        ("damagedSegments", str(damage.damaged_segments)),
    ]


def capture_metadata(reader: RecordingReader) -> list[tuple[str, str]]:
    """``META_DATA_CAPTURE`` rows: those of nsys's keys whose value we know (module docstring)."""
    first = min(reader.processes.values(), key=lambda p: p.start_ns, default=None)
    values = {"CAPTURE_EVENT_TYPE": "NvtxEvents", "DEVICE_TYPE": "Unix"}
    rows = []
    if first is not None:
        host = first.host
        if host:
            values["DEVICE_DISPLAY_NAME"] = host
        argv = (first.cmdline or "").split()
        if argv:
            values["PROCESS_0:COMMAND"] = argv[0]
        values["PROCESS_0:PID"] = str(first.pid)
        values["PROCESS_0:COLLECT_NVTX_TRACE"] = "true"
        values["PROCESS_0:COLLECT_CUDA_TRACE"] = "false"
        values["PROCESS_0:COLLECT_CPU_TRACE"] = "false"
        values["INCLUDE_CHILDREN"] = "true"
        arguments = argv[1:]
    else:
        arguments = []
    for key in _nsys_schema.CAPTURE_KEYS:
        if key == "PROCESS_0:ARGUMENT_0":
            rows += [(f"PROCESS_0:ARGUMENT_{i}", a) for i, a in enumerate(arguments)]
        elif key in values:
            rows.append((key, values[key]))
    return rows

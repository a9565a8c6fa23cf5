"""The file names of a recording, written once (standard library only, so the CLI can use
it before it imports NumPy or the reader).

``record -o PREFIX`` records into the folder ``PREFIX.nvtxrec``; the recorder
(``cc_ops/recorder/segment_writer.cc``) writes one ``PID-START.nvtxseg`` segment file per
process into it (``record`` packs each into ``PID-START.nvtxsegz`` once it is closed); the
exports are ``PREFIX.json``, ``PREFIX.sqlite`` and ``PREFIX.png``.
Commands that read a recording accept ``PREFIX`` or ``PREFIX.nvtxrec``.
"""

from __future__ import annotations

from pathlib import Path

RECORDING_SUFFIX = ".nvtxrec"
SEGMENT_SUFFIX = ".nvtxseg"
#: a closed segment, packed (nvtx_plugins_tf/recorder/recording/packed.py): ``PID-START.nvtxsegz``
PACKED_SEGMENT_SUFFIX = ".nvtxsegz"


#: Bytes the writers of an output add to its name for their temporary files, at most:
#: ``.NAME.XXXXXXXX.events`` (``recorder/exports/_output.py`` and its users).
TEMP_NAME_EXTRA = len(".") + len(".XXXXXXXX") + len(".events")
#: What the outputs of a PREFIX add to its name (``record``, ``merge``, ``export``)
OUTPUT_SUFFIXES = (RECORDING_SUFFIX, ".json", ".sqlite", ".png", "_pqtdir", ".arrow")


def longest_output_name(prefix_name: str) -> int:
    """Bytes of the longest file name the outputs of a prefix named ``prefix_name`` need (their
    temporary files' included): more than the file system's limit (255) cannot be written.

    >>> longest_output_name("run")
    28
    """
    import os

    return len(os.fsencode(prefix_name)) + max(len(s) for s in OUTPUT_SUFFIXES) + TEMP_NAME_EXTRA


def recording_path(value) -> Path:
    """The recording a user names: the path itself, or ``PREFIX.nvtxrec`` when only that exists.

    >>> recording_path("/no/such/run")
    PosixPath('/no/such/run')
    """
    path = Path(value)
    if not path.exists() and path.with_name(path.name + RECORDING_SUFFIX).is_dir():
        return path.with_name(path.name + RECORDING_SUFFIX)
    return path


def recording_stem(path) -> str:
    """``PREFIX``'s last part for ``PREFIX.nvtxrec`` (the name itself without the suffix).

    >>> recording_stem("out/run.nvtxrec"), recording_stem("out/run")
    ('run', 'run')
    """
    name = Path(path).name
    return name[: -len(RECORDING_SUFFIX)] if name.endswith(RECORDING_SUFFIX) else name


def native_path(path) -> bytes:
    """``path`` as the bytes the kernel knows it by, for native code and pyarrow: a name that
    is no UTF-8 (Python holds its bytes as surrogates, ``os.fsdecode``) passes unchanged.

    >>> native_path("run_\\udcff.sqlite")
    b'run_\\xff.sqlite'
    """
    import os

    return os.fsencode(path)


def arrow_file(path, mode: str = "rb"):
    """``pyarrow.OSFile`` of ``path`` (opened by its bytes: pyarrow encodes a ``str`` path as
    UTF-8, which a non-UTF-8 name is not)."""
    import pyarrow as pa

    return pa.OSFile(native_path(path), mode)

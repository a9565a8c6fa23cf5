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

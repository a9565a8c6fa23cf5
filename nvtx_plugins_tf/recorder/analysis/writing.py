"""``analyze``'s outputs written: the tables as Parquet (and CSV, asked for) with pyarrow and
heatmap.png, all at once into OUTDIR (:mod:`.outdir`)."""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.parquet as pq

from ..._paths import arrow_file
from .engines import embedded_threads
from .outdir import OUTPUTS, TABLES, OutdirError, staged
from .painter import Painter
from .reduce import Tables, heatmap_job

__all__ = ["write_tables"]


def write_tables(tables: Tables, outdir, painter: Painter | None = None, *, csv: bool = False) -> list[Path]:
    """OUTDIR/{all_stats,rank_stats,pace,stragglers}.parquet (and .csv with ``csv``, as the
    recipes' ``--csv``: at 83,000 steps a rank they are 80 % of the bytes and 60 % of the
    writing's CPU) and heatmap.png (with
    Pillow, when there are steps), all at once (:mod:`.outdir`: an error, a full disk or a
    signal leaves OUTDIR as it was; an earlier run's heatmap.png goes when this one draws
    none); returns the files written. The heatmap is drawn while the tables are written: by
    ``painter``, the command's process sent these tables' :func:`heatmap_job` (:mod:`.painter`),
    else in a thread (pyarrow's writers leave the GIL free). Raises
    :class:`.outdir.OutdirError` naming the output that could not be written."""
    outdir = Path(outdir)
    job = painter.sent if painter is not None else heatmap_job(tables.ranks)
    with staged(outdir) as (folder, commit):
        names = []
        output = folder / "heatmap.png"
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="nvtx-tf-heatmap") as pool:
            heatmap = pool.submit(_draw_here, job, output) if job is not None and painter is None else None
            try:
                names += _write_files(tables, folder, csv)
                if job is not None:
                    names.append("heatmap.png")  # (named before it is written: an error names it)
                    if not (_painted(painter, job, output) if painter is not None else heatmap.result()):
                        names.pop()  # (no Pillow)
            except OSError as exc:
                name = exc.filename if isinstance(exc.filename, str) and exc.filename in OUTPUTS else names[-1]
                raise OutdirError(f"cannot write {outdir / name}: {_reason(exc)}") from exc
            finally:
                if heatmap is not None:
                    heatmap.cancel()
                if painter is not None:
                    painter.close()  # (killed and reaped, if need be, before the hidden folder goes)
        commit(names)
    return [outdir / name for name in names]


def _write_files(tables: Tables, folder: Path, csv: bool) -> list[str]:
    """The tables as Parquet (and CSV) files in ``folder``, the largest first, in a thread a core
    (pyarrow's writers leave the GIL free); their names, in :data:`~.outdir.OUTPUTS`' order.
    An OSError is raised with ``filename`` the file's name."""
    writers = [("parquet", pq.write_table)]
    if csv:  # (imported only then: 27 ms of CPU a run without --csv need not spend)
        import pyarrow.csv as pacsv

        writers.append(("csv", pacsv.write_csv))
    jobs = [(f"{name}.{suffix}", getattr(tables, name), write) for name in TABLES for suffix, write in writers]

    def write_one(job) -> None:
        name, table, write = job
        # pyarrow's own file, opened by the path's bytes (a path of any bytes, as Linux has
        # them): a Python file under pyarrow's writers, failing on a full disk in a thread
        # beside another, has crashed the process (SIGSEGV, 1 run in 6)
        try:
            with arrow_file(folder / name, "wb") as file:
                write(table, file)
        except OSError as exc:
            exc.filename = name
            raise

    largest_first = sorted(jobs, key=lambda job: -job[1].num_rows)
    with ThreadPoolExecutor(max_workers=min(2, embedded_threads())) as pool:
        for done in [pool.submit(write_one, job) for job in largest_first]:
            done.result()
    return [name for name, _, _ in jobs]


def _painted(painter: Painter, job: tuple, output: Path) -> bool:
    """heatmap.png written from the PNG ``painter`` drew, or drawn here when it could not (as
    without it); False without Pillow."""
    png = painter.wait()
    if png is None:
        return _draw_here(job, output)
    output.write_bytes(png)
    return True


def _draw_here(job: tuple, output: Path) -> bool:
    """heatmap.png drawn by the calling thread; False without Pillow."""
    from . import heatmap

    if not heatmap.available():
        return False
    heatmap.draw_heatmap(job[0], job[1], output, job[2])
    return True


def _reason(exc: OSError) -> str:
    """An OSError's reason in the system's words (pyarrow's carry the errno in their text)."""
    found = re.search(r"\[errno (\d+)\]", str(exc), re.IGNORECASE)
    number = exc.errno or (int(found[1]) if found else None)
    return os.strerror(number) if number else str(exc)

"""Arrow arrays from numpy columns and Python lists, built from their buffers.

``pa.array`` imports pandas the first time it is called when pandas is installed, to check
whether its argument is a pandas object: 0.15-0.2 s, a tenth of exporting 10M events to
Parquet and more than that of analyzing a few ranks. :func:`array` gives the same arrays
(the same values, nulls and type; a cast that does not fit raises as ``pa.array`` does)
without the check, and :func:`scalar` a scalar for ``pyarrow.compute`` (which would make
one of a Python value with ``pa.scalar``: the same check); :func:`to_numpy` views an array's
values as ``Array.to_numpy`` would (which imports pandas too). The Parquet and Arrow exports
and ``analyze`` of recordings and of exports import no pandas (tests/test_arrow_arrays.py,
tests/test_analyze_imports.py); ``pq.read_table`` does (``pq.ParquetFile(...).read`` not).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

__all__ = ["array", "scalar", "to_numpy"]

_STRING_TYPES = (pa.string(), pa.large_string())


def array(values, type: pa.DataType, mask: np.ndarray | None = None) -> pa.Array:
    """``pa.array(values, type, mask=mask)`` for a 1-d numpy array of numbers or booleans, or
    a sequence of Python ints, floats, booleans, strings and None (a null); ``mask``
    (True: null) for numpy values."""
    if isinstance(values, np.ndarray):
        return _from_numpy(values, type, None if mask is None else np.asarray(mask, dtype=bool))
    values = values if isinstance(values, Sequence) else list(values)
    nulls = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
    if type in _STRING_TYPES:
        return _strings(values, nulls, type)
    filled = [0 if v is None else v for v in values] if nulls.any() else values
    numbers = np.array(filled, dtype=bool if pa.types.is_boolean(type) else None)
    if numbers.dtype == object or numbers.ndim != 1:
        raise TypeError(f"not a column of {type} values: {values[:3]!r}...")
    if not len(values):
        return pa.nulls(0, type)
    return _from_numpy(numbers, type, nulls)


def scalar(value, type: pa.DataType) -> pa.Scalar:
    """``pa.scalar(value, type)``, e.g. for ``pc.add(column, scalar(shift, column.type))``."""
    return array([value], type)[0]


_NUMPY_TYPES = {
    pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64,
    pa.uint8(): np.uint8, pa.uint16(): np.uint16, pa.uint32(): np.uint32, pa.uint64(): np.uint64,
    pa.float32(): np.float32, pa.float64(): np.float64,
}  # fmt: skip


def to_numpy(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """``values.to_numpy(zero_copy_only=False)`` of an array (or chunked array) of integers,
    floats or booleans without nulls: a view of its buffer (booleans unpacked). ValueError
    when it holds a null, TypeError for another type."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if values.null_count:
        raise ValueError("a column with nulls has no null-free numpy view")
    n, offset = len(values), values.offset
    if pa.types.is_boolean(values.type):
        if not n:
            return np.zeros(0, dtype=bool)
        bits = np.frombuffer(values.buffers()[1], dtype=np.uint8)
        return np.unpackbits(bits, count=offset + n, bitorder="little")[offset:].view(bool)
    dtype = _NUMPY_TYPES.get(values.type)
    if dtype is None:
        raise TypeError(f"not a column of numbers: {values.type}")
    if not n:
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(values.buffers()[1], dtype=dtype, count=n, offset=offset * np.dtype(dtype).itemsize)


def _validity(mask: np.ndarray | None) -> tuple[pa.Buffer | None, int]:
    if mask is None or not mask.any():
        return None, 0
    return pa.py_buffer(np.packbits(~mask, bitorder="little")), int(mask.sum())


def _from_numpy(values: np.ndarray, type: pa.DataType, mask: np.ndarray | None) -> pa.Array:
    if values.ndim != 1:
        raise ValueError("a column is one-dimensional")
    validity, null_count = _validity(mask)
    if values.dtype == bool:
        data, own = pa.py_buffer(np.packbits(values, bitorder="little")), pa.bool_()
    else:
        values = np.ascontiguousarray(values)
        data, own = pa.py_buffer(values), pa.from_numpy_dtype(values.dtype)
    result = pa.Array.from_buffers(own, len(values), [validity, data], null_count=null_count)
    return result if own == type else result.cast(type)


def _strings(values: Sequence, nulls: np.ndarray, type: pa.DataType) -> pa.Array:
    try:
        encoded = [b"" if v is None else v.encode() for v in values]
    except AttributeError:
        raise TypeError(f"not a column of strings: {values[:3]!r}...") from None
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    large = type == pa.large_string()
    if not large and offsets[-1] >= 2**31:  # past string's 32-bit offsets: as large, then cast (raises)
        return _strings(values, nulls, pa.large_string()).cast(type)
    validity, null_count = _validity(nulls)
    buffers = [validity, pa.py_buffer(offsets if large else offsets.astype(np.int32)), pa.py_buffer(b"".join(encoded))]
    return pa.Array.from_buffers(type, len(encoded), buffers, null_count=null_count)

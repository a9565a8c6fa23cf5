"""Arrow arrays from numpy columns and Python lists, built from their buffers.

``pa.array`` imports pandas the first time it is called when pandas is installed, to check
whether its argument is a pandas object: 0.15-0.2 s, a tenth of exporting 10M events to
Parquet and more than that of analyzing a few ranks. :func:`array` gives the same arrays
(the same values, nulls and type; a cast that does not fit raises as ``pa.array`` does)
without the check, and :func:`scalar` a scalar for ``pyarrow.compute`` (which would make
one of a Python value with ``pa.scalar``: the same check). The Parquet and Arrow exports and
``analyze`` of recordings import no pandas (tests/test_arrow_arrays.py); reading a Parquet
export does (``pq.read_table``, ``to_numpy``), once per process.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

__all__ = ["array", "scalar"]

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

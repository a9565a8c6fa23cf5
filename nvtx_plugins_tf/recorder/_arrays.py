"""Arrow arrays from numpy columns and Python lists, built from their buffers.

``pa.array`` imports pandas the first time it is called when pandas is installed, to check
whether its argument is a pandas object: 0.15-0.2 s, a tenth of exporting 10M events to
Parquet and more than that of analyzing a few ranks. :func:`array` gives the same arrays
(the same values, nulls and type; a cast that does not fit raises as ``pa.array`` does)
without the check, and :func:`scalar` a scalar for ``pyarrow.compute`` (which would make
one of a Python value with ``pa.scalar``: the same check); :func:`to_numpy` views an array's
values as ``Array.to_numpy`` would (which imports pandas too); :func:`filled` and
:func:`is_valid` give an integer column's values with its nulls replaced, and its validity,
as ``pc.fill_null(values.cast(pa.int64()), fill)`` and ``pc.is_valid`` would, and
:func:`take_strings` a string column of a dictionary's entries, without
importing ``pyarrow.compute`` (25-35 ms, a wrapper generated per compute function:
``analyze`` imports none, tests/test_analyze_imports.py). The Parquet and Arrow exports
and ``analyze`` of recordings and of exports import no pandas (tests/test_arrow_arrays.py,
tests/test_analyze_imports.py); ``pq.read_table`` does (``pq.ParquetFile(...).read`` not).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

__all__ = ["array", "scalar", "to_numpy", "filled", "is_valid", "take_strings", "Strings"]
__all__ += ["repeated_strings", "unicode_strings"]

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


def is_valid(values: pa.Array) -> np.ndarray:
    """``pc.is_valid(values)`` as a numpy bool array (True: not null), from the validity
    bitmap."""
    n, offset, bitmap = len(values), values.offset, values.buffers()[0]
    if not values.null_count or bitmap is None:
        return np.full(n, values.null_count == 0 or not pa.types.is_null(values.type), dtype=bool)
    bits = np.frombuffer(bitmap, dtype=np.uint8)
    return np.unpackbits(bits, count=offset + n, bitorder="little")[offset:].view(bool)


def filled(values: pa.Array | pa.ChunkedArray, fill: int) -> np.ndarray:
    """``pc.fill_null(values.cast(pa.int64()), fill)`` as a numpy int64 array (a copy) for a
    column of integers: its values, each null ``fill``; an unsigned value past int64 raises
    ``pa.ArrowInvalid`` as the cast does. Another type is cast by ``pyarrow.compute``."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    dtype = _NUMPY_TYPES.get(values.type)
    if dtype is None or not pa.types.is_integer(values.type):
        import pyarrow.compute as pc

        return to_numpy(pc.fill_null(values.cast(pa.int64()), scalar(fill, pa.int64())))
    n = len(values)
    if not n:
        return np.zeros(0, dtype=np.int64)
    raw = np.frombuffer(values.buffers()[1], dtype=dtype, count=n, offset=values.offset * np.dtype(dtype).itemsize)
    out = raw.astype(np.int64)
    valid = is_valid(values) if values.null_count else None
    if dtype == np.uint64:
        past = raw > np.iinfo(np.int64).max
        if valid is not None:
            past &= valid
        if past.any():
            raise pa.ArrowInvalid(f"Integer value {int(raw[past][0])} not in range: 0 to {np.iinfo(np.int64).max}")
    if valid is not None:
        out[~valid] = fill
    return out


def take_strings(dictionary: Sequence[str], index: np.ndarray, mask: np.ndarray | None = None) -> pa.Array:
    """``dictionary[index]`` as an Arrow string column (``pa.array([dictionary[i] for i in
    index], pa.string())``; ``mask``: True where the row is null), its bytes gathered by numpy:
    no Python string per row, and no ``DictionaryArray.cast`` (pyarrow.compute). Past string's
    32-bit offsets, raises ``pa.ArrowInvalid`` as that cast does. :class:`Strings` encodes a
    dictionary once for several columns.

    >>> take_strings(["a", "bcd", ""], np.array([1, 0, 2, 1]), np.array([0, 0, 0, 1], bool)).to_pylist()
    ['bcd', 'a', '', None]
    """
    return Strings(dictionary).take(index, mask)


class Strings:
    """A dictionary of strings, encoded once, whose :meth:`take` makes columns of them."""

    def __init__(self, dictionary: Sequence[str]):
        encoded = [s.encode() for s in dictionary]
        self.sizes = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        self.blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        self.starts = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum(self.sizes, out=self.starts[1:])
        self._table: np.ndarray | None = None

    def _padded(self) -> np.ndarray:
        """The entries padded to the widest, a row each."""
        if self._table is None:
            width = int(self.sizes.max()) if len(self.sizes) else 0
            self._table = np.zeros((len(self.sizes), width), dtype=np.uint8)
            self._table[np.arange(width) < self.sizes[:, None]] = self.blob
        return self._table

    def take(self, index: np.ndarray, mask: np.ndarray | None = None) -> pa.Array:
        """The column ``dictionary[index]`` (see :func:`take_strings`)."""
        index = np.asarray(index, dtype=np.int64)
        lengths = self.sizes[index] if len(index) else np.zeros(0, dtype=np.int64)
        if mask is not None:
            lengths = np.where(mask, 0, lengths)
        offsets = np.zeros(len(index) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if offsets[-1] >= 2**31:
            raise pa.ArrowInvalid(f"a string column of {offsets[-1]} bytes overflows string's 32-bit offsets")
        width = int(self.sizes.max()) if len(self.sizes) else 0
        if len(index) * width <= 2 * int(offsets[-1]) + 4096:
            # the rows' bytes gathered a fixed width at a time (a byte a row, not an 8-byte place
            # per byte of the column): the padded entries' rows taken, each row's own bytes kept
            data = self._padded()[index][np.arange(width) < lengths[:, None]]
        else:
            # each byte's place in the blob: its row's entry's start, plus its place in the row
            where = np.repeat(self.starts[index] - offsets[:-1], lengths) + np.arange(offsets[-1])
            data = self.blob[where]
        validity, null_count = _validity(mask)
        buffers = [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
        return pa.Array.from_buffers(pa.string(), len(index), buffers, null_count=null_count)


def repeated_strings(dictionary: Sequence[str], counts: Sequence[int]) -> pa.Array:
    """Each ``dictionary[i]`` ``counts[i]`` times, in order, as an Arrow string column (a
    rank's name on each of its rows): the entries' bytes tiled, no gather per row.

    >>> repeated_strings(["ab", "", "c"], [2, 1, 3]).to_pylist()
    ['ab', 'ab', '', 'c', 'c', 'c']
    """
    strings = Strings(dictionary)
    counts = np.asarray(counts, dtype=np.int64)
    offsets = np.zeros(int(counts.sum()) + 1, dtype=np.int64)
    np.cumsum(np.repeat(strings.sizes, counts), out=offsets[1:])
    if offsets[-1] >= 2**31:
        raise pa.ArrowInvalid(f"a string column of {offsets[-1]} bytes overflows string's 32-bit offsets")
    parts = [np.tile(strings.blob[strings.starts[i] : strings.starts[i + 1]], int(c)) for i, c in enumerate(counts)]
    data = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint8)
    buffers = [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.string(), len(offsets) - 1, buffers, null_count=0)


def unicode_strings(values: np.ndarray) -> pa.Array:
    """A numpy array of text (``U`` dtype, no NUL characters) as an Arrow string column, by
    numpy (``pa.array`` would import pandas to rule out its types).

    >>> unicode_strings(np.array(["a", "", "\u00e9t\u00e9"])).to_pylist()
    ['a', '', 'été']
    """
    encoded = np.char.encode(np.asarray(values, dtype=str), "utf-8")  # (padded with NULs to the widest)
    lengths = np.char.str_len(encoded).astype(np.int64)
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] >= 2**31:
        raise pa.ArrowInvalid(f"a string column of {offsets[-1]} bytes overflows string's 32-bit offsets")
    width = encoded.dtype.itemsize
    data = encoded.view(np.uint8).reshape(len(encoded), width)[np.arange(width) < lengths[:, None]]
    buffers = [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(np.ascontiguousarray(data))]
    return pa.Array.from_buffers(pa.string(), len(encoded), buffers, null_count=0)


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

"""The fourth review of the recorder and the native reader (issue 44): each test here failed
before its row's fix."""

from __future__ import annotations

import numpy as np

from nvtx_plugins_tf.recorder.analysis import _native


def test_pairs_whose_hashes_collide_stay_two_pairs():
    # row 5: (domainId, pid) pairs were indexed by a 64-bit hash of both (domainId * C ^ pid);
    # a crafted domainId whose hash equals another pair's was appended to the pairs again each
    # time it followed another pair: 50,001 pairs from 100,000 rows of 2 pairs.
    c = 0x9E3779B97F4A7C15
    inv = pow(c, -1, 2**64)  # key(inv, 6) = 1 ^ 6 = 7 = key(0, 7)
    inv_signed = inv - 2**64 if inv >= 2**63 else inv
    n = 10_000
    b = np.arange(n) & 1
    start = np.arange(n, dtype=np.int64) * 10
    end = start + 5
    event_type = np.full(n, 59, dtype=np.int64)  # push/pop
    pid = np.where(b == 1, 6, 7).astype(np.int64)
    gtid = (pid << 24) | 1
    domain = np.where(b == 1, inv_signed, 0).astype(np.int64)
    message = np.zeros(n, dtype=np.int32)
    ranges = _native.NativeRanges()
    try:
        added = ranges.add_export(
            n, start.ctypes.data, end.ctypes.data, 0, 0, event_type.ctypes.data, gtid.ctypes.data,
            domain.ctypes.data, message,
        )  # fmt: skip
        assert added == n
        assert ranges.pairs().tolist() == [[0, 7], [inv_signed, 6]]
    finally:
        ranges.close()

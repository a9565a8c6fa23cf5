"""Helpers of the native tests: C programs (compiled by the tests) and segment_oracle.py,
an independent Python decoder of the recording format (``from native.segment_oracle import ...``;
pytest puts tests/ on sys.path, as for nsys_oracle)."""

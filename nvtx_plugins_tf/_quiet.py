"""TensorFlow's start-up log lines kept out of our own commands (issue 21.9).

Importing TensorFlow 2.21 prints a few lines to stderr through absl before logging is set up
(``WARNING: All log messages before absl::InitializeLog() ...``, ``I0000 ... oneDNN custom
operations are on``, ``Could not find cuda drivers``); ``TF_CPP_MIN_LOG_LEVEL`` does not hold
them back. In ``nvtx-tf doctor`` and ``nvtx-tf build`` (the commands that import TensorFlow:
``record`` only runs the user's program, whose output is left exactly as it is; ``report``
and ``merge`` never import it) the import runs with file descriptor 2 pointed at a
temporary file, and every line of it that is not such a start-up line is written to stderr
afterwards. ``NVTX_TF_VERBOSE=1`` keeps everything.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile

VERBOSE_ENV = "NVTX_TF_VERBOSE"

# absl/TF start-up lines: the absl preamble, and absl's log lines of the import and device
# discovery ("I0000 00:00:1795576595.822561    3083 port.cc:153] ...", "E0000 ...
# cuda_platform.cc:52] failed call to cuInit" on a machine without a GPU).
_STARTUP_LINE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\)|[IWE]\d{4} [\d:.]+\s+\d+ \S+:\d+\] )"
)


@contextlib.contextmanager
def quiet_tensorflow_startup():
    """Runs the body (an ``import tensorflow``) with TensorFlow's start-up lines dropped."""
    if os.environ.get(VERBOSE_ENV) == "1":
        yield
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = [line for line in captured.read().decode(errors="replace").splitlines(True)
                    if not _STARTUP_LINE.match(line)]  # fmt: skip
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()

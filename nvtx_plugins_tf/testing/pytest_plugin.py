"""pytest plugin: attach the NVTX recorder to the test session; ``nvtx_capture`` fixture.

Loaded through the ``pytest11`` entry point (or ``-p nvtx_plugins_tf.testing.pytest_plugin``).
At import -- before any test code makes an NVTX call -- it sets
``NVTX_INJECTION64_PATH`` to ``libnvtx_recorder.so`` and ``NVTX_TF_RECORD_DIR`` to a fresh
temporary directory, so every process of the session (subprocesses included) records.
Nothing is changed when ``NVTX_INJECTION64_PATH`` is already set or
``NVTX_TF_NO_AUTO_RECORD=1``. The session directory is removed at the end unless
``NVTX_TF_KEEP_RECORDING=1``.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from . import INJECTION_ENV, RECORD_DIR_ENV, capture

_session_dir: str | None = None
_attach_error: str | None = None


def _auto_attach() -> None:
    global _session_dir, _attach_error
    if os.environ.get("NVTX_TF_NO_AUTO_RECORD") == "1" or os.environ.get(INJECTION_ENV):
        return
    try:
        from .._native_libs import native_library

        library = str(native_library("recorder"))
    except Exception as exc:  # noqa: BLE001 - never break the test session
        _attach_error = str(exc)
        return
    _session_dir = tempfile.mkdtemp(prefix="nvtx_tf_session_")
    os.environ[INJECTION_ENV] = library
    os.environ[RECORD_DIR_ENV] = _session_dir


_auto_attach()


def pytest_report_header(config):
    if _session_dir:
        return f"nvtx_plugins_tf: NVTX recorder attached, recording into {_session_dir}"
    if _attach_error:
        return f"nvtx_plugins_tf: NVTX recorder not attached ({_attach_error})"
    return None


def pytest_unconfigure(config):
    if _session_dir and os.environ.get("NVTX_TF_KEEP_RECORDING") != "1":
        shutil.rmtree(_session_dir, ignore_errors=True)


@pytest.fixture
def nvtx_capture():
    """A running :class:`nvtx_plugins_tf.testing.Capture` of the test's NVTX ranges.

    The capture stops on the first access to its results (``ranges``, ``count(...)``,
    ...) or on ``stop()``, and at the latest when the test ends.
    """
    with capture() as cap:
        yield cap

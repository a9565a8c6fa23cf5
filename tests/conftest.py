"""Fixtures shared by the test files.

* ``child_env``: the environment for a child Python process: this checkout first on
  PYTHONPATH, none of the test session's recorder settings unless a recording is asked for.
* ``capture_steps``: call a step once outside the capture (tracing), then record N calls.
* ``functions_eagerly``: run a test with ``tf.function`` traced and again run eagerly
  (as tensorflow/addons' ``maybe_run_functions_eagerly``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _child_env(recording=None, **extra) -> dict:
    from nvtx_plugins_tf import recorder

    env = dict(os.environ)
    from nvtx_plugins_tf import _native_libs as libs

    for name in (recorder.INJECTION_ENV, recorder.RECORD_DIR_ENV, "NVTX_TF_KERAS_LAYERS", "NVTX_TF_OP_RANGES"):
        env.pop(name, None)  # the session's recorder settings and record's start-up switches
    for name in (libs.CAPTURE_RANGE_ENV, libs.CAPTURE_RANGE_END_ENV, libs.DOMAIN_INCLUDE_ENV, libs.DOMAIN_EXCLUDE_ENV):
        env.pop(name, None)  # and what it writes (a session under record --capture-range ...)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if recording is not None:
        env.update(recorder.environment(recording))
    env.update({k: str(v) for k, v in extra.items()})
    return env


@pytest.fixture
def child_env():
    """``child_env(recording=None, **variables) -> dict`` (see the module docstring)."""
    return _child_env


def _capture_steps(step, *args, steps: int = 1):
    from nvtx_plugins_tf.testing import capture

    step(*args)  # traced outside the capture
    with capture() as rec:
        for _ in range(steps):
            step(*args)
    return rec


@pytest.fixture
def capture_steps():
    """``capture_steps(step, *args, steps=1) -> Capture`` (see the module docstring)."""
    return _capture_steps


@pytest.fixture(params=[False, True], ids=["traced", "eager"])
def functions_eagerly(request):
    """Runs the test twice: ``tf.function`` traced, then run eagerly."""
    import tensorflow as tf

    tf.config.run_functions_eagerly(request.param)
    try:
        yield request.param
    finally:
        tf.config.run_functions_eagerly(False)

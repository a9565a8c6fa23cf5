"""NVTXHook: NVTX ranges around ``session.run`` steps of a ``tf.compat.v1`` session.

Same constructor as NVIDIA's old ``nvtx.plugins.tf.estimator.NVTXHook``::

    hook = nvtx_tf.hooks.NVTXHook(skip_n_steps=1, name="Train")
    with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as sess:
        while not sess.should_stop():
            sess.run(train_op)

gives one range ``step {n}`` per ``run`` call (``n`` from 0; the step number is also the
payload) after the first ``skip_n_steps`` ones, and, when ``name`` is given, an outer
range ``name`` from session creation to ``end``. The ranges are host-side (``nvtx``
package), in the domain ``domain_name`` (NVTX's default domain unless given).
"""

from __future__ import annotations

import nvtx
import tensorflow as tf
from nvtx._lib import EventAttributes, dummy_domain

__all__ = ["NVTXHook"]

_STEP_COLOR = 0xFF76B900
_SESSION_COLOR = 0xFF1F77B4


class NVTXHook(tf.compat.v1.train.SessionRunHook):
    """One NVTX range per ``session.run`` and an optional outer range over the session.

    Args:
      skip_n_steps: number of first steps without a range (warm-up).
      name: name of the outer range (``None``: no outer range).
      domain_name: NVTX domain (``None``: the default domain).
      step_message: format of step range names (``{step}`` is the step number).
    """

    def __init__(self, skip_n_steps: int = 0, name: str | None = None, *, domain_name: str | None = None,
                 step_message: str = "step {step}"):
        if isinstance(skip_n_steps, bool) or not isinstance(skip_n_steps, int) or skip_n_steps < 0:
            raise ValueError(f"skip_n_steps must be an int >= 0, got {skip_n_steps!r}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None, got {type(name).__name__}")
        self.skip_n_steps = skip_n_steps
        self.name = name
        self.domain_name = domain_name
        self.step_message = step_message
        self._domain = nvtx.get_domain(domain_name)
        self._active = self._domain is not dummy_domain
        self._step = 0
        self._step_range = None
        self._session_range = None

    def _start(self, message, color, payload=None):
        domain = self._domain
        return domain.start_range(EventAttributes(domain, domain.get_registered_string(message), color, None, payload))

    def begin(self):
        self._step = 0

    def after_create_session(self, session, coord):
        if self._active and self.name and self._session_range is None:
            self._session_range = self._start(self.name, _SESSION_COLOR)

    def before_run(self, run_context):
        if self._active and self._step >= self.skip_n_steps:
            if self._step_range is not None:
                self._domain.end_range(self._step_range)
            self._step_range = self._start(self.step_message.format(step=self._step), _STEP_COLOR, self._step)
        return None

    def after_run(self, run_context, run_values):
        if self._step_range is not None:
            self._domain.end_range(self._step_range)
            self._step_range = None
        self._step += 1

    def end(self, session):
        self.close()

    def close(self):
        """Close the ranges still open (``end`` does; ``MonitoredSession`` skips ``end`` on errors)."""
        if self._step_range is not None:
            self._domain.end_range(self._step_range)
            self._step_range = None
        if self._session_range is not None:
            self._domain.end_range(self._session_range)
            self._session_range = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

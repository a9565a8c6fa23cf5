"""NVTXHook: NVTX ranges around ``session.run`` steps of a ``tf.compat.v1`` session.

Same constructor as NVIDIA's old ``nvtx.plugins.tf.estimator.NVTXHook``:

>>> import tensorflow as tf
>>> import nvtx_plugins_tf as nvtx_tf
>>> from nvtx_plugins_tf.testing import capture
>>> with tf.Graph().as_default():
...     step = tf.compat.v1.train.get_or_create_global_step()
...     train_op = tf.compat.v1.assign_add(step, 1)
...     hook = nvtx_tf.hooks.NVTXHook(skip_n_steps=1, name="Train")
...     stop = tf.compat.v1.train.StopAtStepHook(last_step=3)
...     with capture() as rec:
...         with tf.compat.v1.train.MonitoredSession(hooks=[hook, stop]) as sess:
...             while not sess.should_stop():
...                 _ = sess.run(train_op)
>>> [(r.message, r.payload) for r in sorted(rec.find(domain=""), key=lambda r: r.start_ns)]
[('Train', None), ('step 1', 1), ('step 2', 2)]

gives one range ``step {n}`` per ``run`` call (``n`` from 0; the step number is also the
payload) after the first ``skip_n_steps`` ones, and, when ``name`` is given, an outer
range ``name`` from session creation to ``end``. The ranges are host-side start/end
ranges in the domain ``domain_name`` (NVTX's default domain unless given), emitted with
the NVTX C API directly through :mod:`nvtx_plugins_tf._host_ranges` (the adapter
NVTXCallback uses too), so that Nsight Systems 2022.4 shows them; not through the ``nvtx``
package, whose ranges it does not show.

Memory: the range names are those of NVIDIA's old hook (``step 0``, ``step 1`` ...), so each
step's name is a new NVTX registered string. They go through the domain's registered-string
cache, which is bounded (:data:`nvtx_plugins_tf._host_ranges.MAX_CACHED_STRINGS` entries
per domain, the oldest dropped first): the hook's memory stays fixed whatever the number of
steps (the ``nvtx`` package's cache was unbounded: +97 MiB per 200,000 steps). What grows is
the attached tool's copy of each name (Nsight Systems, or the package's recorder). For a
fixed cost there too, pass a ``step_message`` without ``{step}``, e.g.
``NVTXHook(step_message="step")``: one string is registered and the step number is only in
the payload.
"""

from __future__ import annotations

from nvtx_plugins_tf import _host_ranges, _tensorflow

tf = _tensorflow.require()

__all__ = ["NVTXHook"]

_STEP_COLOR = 0xFF76B900
_SESSION_COLOR = 0xFF1F77B4


class NVTXHook(tf.compat.v1.train.SessionRunHook):
    """One NVTX range per ``session.run`` and an optional outer range over the session.

    Args:
      skip_n_steps: number of first steps without a range (warm-up).
      name: name of the outer range (``None``: no outer range).
      domain_name: NVTX domain (``None``: the default domain).
      step_message: format of step range names (``{step}`` is the step number; without
        ``{step}`` one string serves every step, the number being the payload).
    """

    def __init__(
        self,
        skip_n_steps: int = 0,
        name: str | None = None,
        *,
        domain_name: str | None = None,
        step_message: str = "step {step}",
    ):
        if isinstance(skip_n_steps, bool) or not isinstance(skip_n_steps, int) or skip_n_steps < 0:
            raise ValueError(f"skip_n_steps must be an int >= 0, got {skip_n_steps!r}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None, got {type(name).__name__}")
        if not isinstance(step_message, str):
            raise TypeError(f"step_message must be a str, got {type(step_message).__name__}")
        self.skip_n_steps = skip_n_steps
        self.name = name
        self.domain_name = domain_name
        self.step_message = step_message
        self._domain = _host_ranges.domain(domain_name)  # one per name; inactive when no tool
        self._active = self._domain.active
        self._per_step_names = "{step}" in step_message
        self._step = 0
        self._step_range = None
        self._session_range = None

    def begin(self):
        self._step = 0

    def after_create_session(self, session, coord):
        if self._active and self.name and self._session_range is None:
            self._session_range = self._domain.start(self.name, _SESSION_COLOR)

    def before_run(self, run_context):
        if self._active and self._step >= self.skip_n_steps:
            if self._step_range is not None:
                self._domain.end(self._step_range)
            message = self.step_message.format(step=self._step) if self._per_step_names else self.step_message
            self._step_range = self._domain.start(message, _STEP_COLOR, 0, self._step)
        return None

    def after_run(self, run_context, run_values):
        if self._step_range is not None:
            self._domain.end(self._step_range)
            self._step_range = None
        self._step += 1

    def end(self, session):
        self.close()

    def close(self):
        """Close the ranges still open (``end`` does; ``MonitoredSession`` skips ``end`` on errors)."""
        if self._step_range is not None:
            self._domain.end(self._step_range)
            self._step_range = None
        if self._session_range is not None:
            self._domain.end(self._session_range)
            self._session_range = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

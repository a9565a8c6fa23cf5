"""Old import path: ``nvtx.plugins.tf.estimator.NVTXHook`` is :class:`nvtx_plugins_tf.hooks.NVTXHook`."""

from nvtx_plugins_tf.hooks import NVTXHook

__all__ = ["NVTXHook"]

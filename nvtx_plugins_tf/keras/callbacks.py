"""NVTXCallback: NVTX ranges for Keras ``fit`` / ``evaluate`` / ``predict``, epochs and batches.

Same names as NVIDIA's old ``nvtx.plugins.tf.keras.callbacks.NVTXCallback`` by default:

>>> import numpy as np
>>> import nvtx_plugins_tf as nvtx_tf
>>> from nvtx_plugins_tf.keras import keras
>>> from nvtx_plugins_tf.testing import capture
>>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
>>> model.compile(optimizer="sgd", loss="mse")
>>> x, y = np.ones((8, 4)), np.ones((8, 1))
>>> with capture() as rec:
...     _ = model.fit(x, y, batch_size=4, epochs=2, verbose=0, callbacks=[nvtx_tf.keras.callbacks.NVTXCallback()])
>>> [r.message for r in sorted(rec.find(domain="Keras"), key=lambda r: r.start_ns)]
['Train', 'epoch 0', 'batch 0', 'batch 1', 'epoch 1', 'batch 0', 'batch 1']
>>> [r.payload for r in rec.find(domain="Keras", category="phase: Train")]
[0, 1, 0, 1]

gives ``Train`` > ``epoch 0`` > ``batch 0``, ``batch 1`` ... (and ``Test``/``Predict`` for
``evaluate``/``predict``, with their own batch ranges), in the ``"Keras"`` domain. The
batch (or epoch) number is the range's payload and the batch ranges carry the phase as
their NVTX category, named ``phase: Train`` / ``phase: Test`` / ``phase: Predict``
(:data:`CATEGORY_PREFIX` + the outer range's name).

Why the prefix: a category name is a text of its own in a profile -- Nsight Systems
exports it as an ``NVTX_EVENTS`` row (``eventType`` 33) whose ``text`` is the name. Named
plainly ``Train``, it made queries written for NVIDIA's old callback (which named no
category), such as ``SELECT count(*), avg(end - start) FROM NVTX_EVENTS WHERE text LIKE
'Train' AND start > 0``, count the category with the range (2 instead of 1). With the
prefix, range texts stay unique to ranges and such queries give the old answers.

The ranges are host-side: they cover what the Keras loop does between the callback calls.
They are emitted with the NVTX C API directly (:mod:`nvtx_plugins_tf._host_ranges`, the
adapter NVTXHook uses too), not through the ``nvtx`` package, whose ranges Nsight Systems
2022.4 does not show. Batch ranges are start/end ranges (Keras may begin and end a batch
on different threads). Domains, categories and strings are registered once (strings in
the domain's bounded cache); with no NVTX tool attached, or ``NVTX_DISABLE`` set, every
callback returns after one attribute check (see ``benchmarks/bench_keras.py``).

When ``fit``/``evaluate``/``predict`` raise (a callback's or a data generator's exception,
Ctrl-C), Keras calls no end hook; the callback's ranges are closed as the exception leaves the
call, by a guard put around ``Model.fit``/``evaluate``/``predict`` when this module is imported
(one Python call per ``fit``). Not later: in ``model.fit(..., callbacks=[NVTXCallback()])``
Python looks ``model.fit`` up before it makes the callback, so a guard installed by the
callback's constructor missed the first ``fit``.
"""

from __future__ import annotations

import functools
import threading

from nvtx_plugins_tf import _host_ranges
from nvtx_plugins_tf.keras._compat import keras

__all__ = ["NVTXCallback", "DEFAULT_DOMAIN", "DEFAULT_COLORS", "CATEGORY_PREFIX"]

DEFAULT_DOMAIN = "Keras"

#: The batch ranges' category is named this + the phase's range name (``"phase: Train"``),
#: so that no category name equals a range text (see the module docstring).
CATEGORY_PREFIX = "phase: "

#: ARGB colors of the range kinds.
DEFAULT_COLORS = {
    "train": 0xFF76B900,  # NVIDIA green
    "test": 0xFFFFA500,  # orange
    "predict": 0xFF7400FF,  # purple
    "epoch": 0xFF1F77B4,  # blue
    "batch": 0xFF17BECF,  # cyan
}

_MODES = ("train", "test", "predict")
_BATCH_KEYS = {mode: mode + "/batch" for mode in _MODES}


# Ranges closed where a failed fit/evaluate/predict unwinds
# --------------------------------------------------------
# Keras calls no end hook when fit() raises (a callback's or a generator's exception, a
# KeyboardInterrupt): the ranges would stay open until a later fit with the same callback,
# or the end of the process. So Model.fit/evaluate/predict get a guard (installed once, when
# this module is imported, i.e. before any NVTXCallback exists: ``m.fit(...,
# callbacks=[NVTXCallback()])`` looks ``m.fit`` up before it makes the callback): the
# callbacks that began a phase during the outermost call close every range they have open
# when an exception leaves it, at the time it does.

_guard_state = threading.local()  # .depth: guarded calls on this thread; .callbacks
_guard_lock = threading.Lock()
_GUARD_MARK = "_nvtx_tf_callback_guard"


def _guard(method):
    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        depth = getattr(_guard_state, "depth", 0)
        if depth == 0:
            _guard_state.callbacks = []
        _guard_state.depth = depth + 1
        try:
            return method(self, *args, **kwargs)
        except BaseException:
            for callback in _guard_state.callbacks:
                callback._close_all()
            raise
        finally:
            _guard_state.depth = depth

    setattr(guarded, _GUARD_MARK, True)
    return guarded


def _install_guard() -> None:
    with _guard_lock:
        for name in ("fit", "evaluate", "predict"):
            original = getattr(keras.Model, name, None)
            if original is not None and not getattr(original, _GUARD_MARK, False):
                setattr(keras.Model, name, _guard(original))


_install_guard()


class NVTXCallback(keras.callbacks.Callback):
    """NVTX ranges around training, evaluation, prediction, each epoch and each batch.

    Args:
      domain_name: NVTX domain of all the ranges (``None``: NVTX's default domain).
      train_message, test_message, predict_message: names of the outer ranges; the batch
        ranges of each phase carry the category ``CATEGORY_PREFIX + message``.
      epoch_message: format of epoch range names (``{epoch}`` is the epoch index).
      batch_message: format of batch range names (``{batch}`` is the batch index).
        Use a constant such as ``"batch"`` to register a single string; the index is the
        payload either way.
      batch_ranges: ``False`` to record no batch range.
      colors: overrides of :data:`DEFAULT_COLORS` (keys ``train``, ``test``,
        ``predict``, ``epoch``, ``batch``; ARGB ints or color names).
      profile_batches: ``(first, last)``: a start/end range named ``profile_message``
        (default ``"profile"``) in the callback's domain around training steps ``first`` to
        ``last`` (inclusive, counted from 0 across epochs, as TensorBoard's
        ``profile_batch``), once; it opens around the first batch range and closes after the
        last. ``python -m nvtx_plugins_tf record --capture-range profile@Keras`` (or
        ``nsys profile --capture-range=nvtx --nvtx-capture=profile@Keras``; ``profile``
        alone with ``domain_name=None``) then records only those steps. The text is a
        registered string, which nsys's default capture-range matching requires.
      profile_message: the name of that range.
    """

    def __init__(
        self,
        domain_name: str | None = DEFAULT_DOMAIN,
        *,
        train_message: str = "Train",
        test_message: str = "Test",
        predict_message: str = "Predict",
        epoch_message: str = "epoch {epoch}",
        batch_message: str = "batch {batch}",
        batch_ranges: bool = True,
        colors: dict | None = None,
        profile_batches: tuple[int, int] | None = None,
        profile_message: str = "profile",
    ):
        super().__init__()
        if profile_batches is not None:
            try:
                first, last = (int(b) for b in profile_batches)
                ok = len(tuple(profile_batches)) == 2 and 0 <= first <= last
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise ValueError(
                    f"profile_batches must be a pair (first, last) with 0 <= first <= last, got {profile_batches!r}"
                )
            profile_batches = (first, last)
        if not isinstance(profile_message, str) or not profile_message:
            raise TypeError(f"profile_message must be a non-empty str, got {profile_message!r}")
        for argument, value in (
            ("train_message", train_message),
            ("test_message", test_message),
            ("predict_message", predict_message),
            ("epoch_message", epoch_message),
            ("batch_message", batch_message),
        ):
            if not isinstance(value, str):
                raise TypeError(f"{argument} must be a str, got {type(value).__name__}")
        if domain_name is not None and not isinstance(domain_name, str):
            raise TypeError(f"domain_name must be a str or None, got {type(domain_name).__name__}")
        unknown = set(colors or {}) - set(DEFAULT_COLORS)
        if unknown:
            raise ValueError(f"colors: unknown keys {sorted(unknown)}; expected some of {sorted(DEFAULT_COLORS)}")
        self.domain_name = domain_name
        self.messages = {"train": train_message, "test": test_message, "predict": predict_message}
        self.epoch_message = epoch_message
        self.batch_message = batch_message
        self.batch_ranges = bool(batch_ranges)
        self.colors = {**DEFAULT_COLORS, **(colors or {})}
        self._argb = {key: _host_ranges.color(value, f"colors[{key!r}]") for key, value in self.colors.items()}
        self._domain = _host_ranges.domain(domain_name)  # one per name; inactive when no tool
        self._active = self._domain.active
        self._batches = self._active and self.batch_ranges  # checked once per batch
        self.profile_batches = profile_batches
        self.profile_message = profile_message
        # (first, last) until the profile range closed; None when there is none to open
        self._profile = profile_batches if self._active else None
        self._step = 0  # training steps begun, across epochs
        self._open: dict[str, int] = {}
        # Per phase: the batches a pass over the data had, learned when Keras began one more
        # and found the data exhausted (None: unknown); the index of the open batch range; a
        # batch begun past the known count without a range, until its end or the pass's end.
        self._known_batches: dict[str, int | None] = dict.fromkeys(_MODES)
        self._batch_index: dict[str, int] = {}
        self._skipped: dict[str, bool] = dict.fromkeys(_MODES, False)
        self._categories = {}
        if self._active:
            for mode in _MODES:
                self._categories[mode] = self._domain.category(CATEGORY_PREFIX + self.messages[mode])
            _install_guard()  # (a no-op unless keras.Model's methods were replaced since the import)

    # ------------------------------------------------------------------ internals
    def _start(self, key: str, text: str, color_key: str, category: int = 0, payload: int | None = None) -> None:
        previous = self._open.pop(key, None)
        domain = self._domain
        if previous is not None:  # left open by an interrupted loop
            domain.end(previous)
        self._open[key] = domain.start(text, self._argb[color_key], category, payload)

    def _end(self, key: str) -> None:
        range_id = self._open.pop(key, None)
        if range_id is not None:
            self._domain.end(range_id)

    def _begin_mode(self, mode: str) -> None:
        if self._active:
            self._start(mode, self.messages[mode], mode)
            guarded = getattr(_guard_state, "callbacks", None)
            if getattr(_guard_state, "depth", 0) and self not in guarded:
                guarded.append(self)

    def _close_all(self) -> None:
        """End every range this callback has open, innermost first (a failed fit unwinds)."""
        for key in reversed(list(self._open)):
            self._end(key)
        if self._profile is not None and self._step > self._profile[0]:
            self._profile = None  # its window was open: it is over

    def _end_mode(self, mode: str) -> None:
        if self._active:
            self._end_pass(mode)
            if mode == "train":
                self._end("train/epoch")
                self._end_profile()
            self._end(mode)

    def _start_profile(self) -> None:
        """The profile range: a start/end range whose message is a registered string (the
        callback's other ranges carry plain text, see _host_ranges), as nsys's capture range
        matches only registered strings by default (NSYS_NVTX_PROFILER_REGISTER_ONLY=1)."""
        self._open["profile"] = self._domain.start_registered(self.profile_message, self._argb["train"])

    def _end_profile(self) -> None:
        if "profile" in self._open:
            self._end("profile")
            self._profile = None

    def _begin_batch(self, mode: str, batch: int) -> bool:
        """Start the batch range of ``mode`` (the hot path: one call per batch); False when
        ``batch`` is past the batches a pass had (no range: see _end_pass)."""
        key = _BATCH_KEYS[mode]
        previous = self._open.pop(key, None)
        domain = self._domain
        if previous is not None:  # left open by an interrupted loop
            domain.end(previous)
        batch = int(batch)
        known = self._known_batches[mode]
        if known is not None and batch >= known:
            self._skipped[mode] = True
            return False
        self._batch_index[mode] = batch
        self._open[key] = domain.start(
            self.batch_message.format(batch=batch), self._argb["batch"], self._categories[mode], batch
        )
        return True

    def _end_batch(self, mode: str) -> None:
        range_id = self._open.pop(_BATCH_KEYS[mode], None)
        if range_id is not None:
            self._domain.end(range_id)
        elif self._skipped[mode]:  # the data had more batches this pass: forget the count
            self._skipped[mode] = False
            self._known_batches[mode] = None

    def _end_pass(self, mode: str) -> None:
        """A pass over the data (an epoch, a validation, an evaluate or predict call) ended.

        A batch range still open is a batch Keras began and then found no data for (on data
        of unknown length Keras learns the end only so): its range ends here, and its index is
        the number of batches the pass had. Later passes of the same ``fit`` begin no range
        from that index on (Keras 3 begins the batch past the end in every epoch and every
        validation); one that turns out to have data ends with no range, and the count is
        forgotten. The first pass's extra range cannot be taken back.
        """
        key = _BATCH_KEYS[mode]
        if key in self._open:
            self._known_batches[mode] = self._batch_index[mode]
            self._end(key)
        self._skipped[mode] = False

    @property
    def open_ranges(self) -> list[str]:
        """Keys of the ranges this callback has open (``train``, ``train/epoch`` ...)."""
        return list(self._open)

    # ------------------------------------------------------------------ Keras hooks
    def on_train_begin(self, logs=None):
        self._known_batches["train"] = self._known_batches["test"] = None  # new data
        self._begin_mode("train")

    def on_train_end(self, logs=None):
        self._end_mode("train")

    def on_test_begin(self, logs=None):
        if "train" not in self._open:  # evaluate(): new data (fit's validation keeps its count)
            self._known_batches["test"] = None
        self._begin_mode("test")

    def on_test_end(self, logs=None):
        self._end_mode("test")

    def on_predict_begin(self, logs=None):
        self._known_batches["predict"] = None
        self._begin_mode("predict")

    def on_predict_end(self, logs=None):
        self._end_mode("predict")

    def on_epoch_begin(self, epoch, logs=None):
        if self._active:
            self._start("train/epoch", self.epoch_message.format(epoch=epoch), "epoch", 0, int(epoch))

    def on_epoch_end(self, epoch, logs=None):
        if self._active:
            self._end_pass("train")
            self._end("train/epoch")

    def on_train_batch_begin(self, batch, logs=None):
        if self._profile is not None and self._step == self._profile[0] and "profile" not in self._open:
            self._start_profile()
        if self._batches and not self._begin_batch("train", batch):
            return  # past the data's end (not a training step)
        self._step += 1

    def on_train_batch_end(self, batch, logs=None):
        if self._active:
            self._end_batch("train")
            if self._profile is not None and self._step > self._profile[1]:
                self._end_profile()

    def on_test_batch_begin(self, batch, logs=None):
        if self._batches:
            self._begin_batch("test", batch)

    def on_test_batch_end(self, batch, logs=None):
        if self._active:
            self._end_batch("test")

    def on_predict_batch_begin(self, batch, logs=None):
        if self._batches:
            self._begin_batch("predict", batch)

    def on_predict_batch_end(self, batch, logs=None):
        if self._active:
            self._end_batch("predict")

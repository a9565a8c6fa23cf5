"""NVTXCallback: Train/Test/Predict, epoch and batch ranges with payloads; none left open."""

import shutil
import sqlite3
import time

import numpy as np
import pytest

from nvtx_plugins_tf.keras import keras
from nvtx_plugins_tf.keras.callbacks import DEFAULT_COLORS, NVTXCallback
from nvtx_plugins_tf.recorder import export_sqlite
from nvtx_plugins_tf.testing import capture

N, BATCH, EPOCHS = 48, 8, 2
STEPS = N // BATCH


def _model():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def _data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(N, 4)).astype("float32"), rng.normal(size=(N, 1)).astype("float32")


def test_fit_ranges_names_payloads_and_nesting():
    x, y = _data()
    model = _model()
    with capture() as rec:
        model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, verbose=0, callbacks=[NVTXCallback()])
    assert rec.count(message="Train", domain="Keras") == 1
    (train,) = rec.find(message="Train", domain="Keras")
    assert train.color == DEFAULT_COLORS["train"]
    for epoch in range(EPOCHS):
        (ep,) = rec.find(message=f"epoch {epoch}", domain="Keras")
        assert ep.payload == epoch
        assert train.start_ns <= ep.start_ns <= ep.end_ns <= train.end_ns
    batches = [r for r in rec.ranges if r.domain == "Keras" and r.message.startswith("batch ")]
    assert len(batches) == EPOCHS * STEPS
    for b in batches:
        assert b.message == f"batch {b.payload}"
        assert b.category_name == "phase: Train"
        assert b.color == DEFAULT_COLORS["batch"]
    assert sorted(b.payload for b in batches) == sorted(list(range(STEPS)) * EPOCHS)
    assert not rec.open_ranges


def test_evaluate_predict_and_validation():
    x, y = _data()
    model = _model()
    cb = NVTXCallback()
    with capture() as rec:
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, validation_data=(x, y), callbacks=[cb])
        model.evaluate(x, y, batch_size=BATCH, verbose=0, callbacks=[cb])
        model.predict(x, batch_size=BATCH, verbose=0, callbacks=[cb])
    assert rec.count(message="Train", domain="Keras") == 1
    assert rec.count(message="Test", domain="Keras") == 2  # validation + evaluate
    assert rec.count(message="Predict", domain="Keras") == 1
    assert len(rec.find(domain="Keras", category="phase: Train")) == STEPS
    assert len(rec.find(domain="Keras", category="phase: Test")) == 2 * STEPS
    assert len(rec.find(domain="Keras", category="phase: Predict")) == STEPS
    (validation,) = [r for r in rec.find(message="Test") if r.start_ns < rec.find(message="Train")[0].end_ns]
    (epoch,) = rec.find(message="epoch 0")
    assert epoch.start_ns <= validation.start_ns <= validation.end_ns <= epoch.end_ns
    assert not rec.open_ranges
    assert cb.open_ranges == []


def test_run_eagerly_and_configuration():
    x, y = _data()
    model = _model()
    model.compile(optimizer="sgd", loss="mse", run_eagerly=True)
    cb = NVTXCallback(
        domain_name="Mine", train_message="fit", epoch_message="E{epoch}", batch_message="step", colors={"batch": "red"}
    )
    with capture() as rec:
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[cb])
    assert rec.count(message="fit", domain="Mine") == 1
    assert rec.count(message="E0", domain="Mine") == 1
    steps = rec.find(message="step", domain="Mine")
    assert sorted(r.payload for r in steps) == list(range(STEPS))
    assert steps[0].color & 0xFFFFFF == 0xFF0000
    assert not rec.open_ranges


def test_no_batch_ranges_and_argument_checks():
    x, y = _data()
    with capture() as rec:
        _model().fit(x, y, batch_size=BATCH, verbose=0, callbacks=[NVTXCallback(batch_ranges=False)])
    assert rec.count(domain="Keras") == 2  # Train + epoch 0
    with pytest.raises(ValueError):
        NVTXCallback(colors={"bogus": 1})
    with pytest.raises(TypeError):
        NVTXCallback(batch_message=3)


def test_stop_training_leaves_nothing_open():
    x, y = _data()

    class Stop(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 1:
                self.model.stop_training = True

    with capture() as rec:
        _model().fit(x, y, batch_size=BATCH, epochs=3, verbose=0, callbacks=[NVTXCallback(), Stop()])
    assert rec.count(message="Train") == 1
    assert not rec.open_ranges


def test_per_batch_cost_is_small():
    """Sanity bound only: the test session has the recorder attached and the machine is shared;
    benchmarks/bench_keras.py measures the no-tool cost (target <= 2 us). Batch numbers
    repeat as over epochs of 100 steps: 20,000 distinct names would also fill the
    recorder's registry of remembered strings (8192 per process) for the later tests."""
    cb = NVTXCallback()
    n = 20000
    t0 = time.perf_counter()
    for i in range(n):
        cb.on_train_batch_begin(i % 100)
        cb.on_train_batch_end(i % 100)
    per_batch = (time.perf_counter() - t0) / n
    assert per_batch < 500e-6


def test_old_package_queries_count_ranges_not_categories(tmp_path):
    """Issue 9 item 21: the old package's query `text LIKE 'Train' AND start > 0` on the
    nsys-schema export gives one row per range again (a category named 'Train' was a second)."""
    x, y = _data()
    model = _model()
    cb = NVTXCallback()
    with capture(keep=True) as rec:
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[cb])
        model.evaluate(x, y, batch_size=BATCH, verbose=0, callbacks=[cb])
        model.predict(x, batch_size=BATCH, verbose=0, callbacks=[cb])
    out = tmp_path / "rec.sqlite"
    try:
        export_sqlite(rec.directory, out)
    finally:
        shutil.rmtree(rec.directory, ignore_errors=True)
    con = sqlite3.connect(out)
    for text in ("Train", "Test", "Predict"):
        count, avg = con.execute(
            "SELECT count(*), avg(end - start) FROM NVTX_EVENTS WHERE text LIKE ? AND start > 0", (text,)
        ).fetchone()
        assert count == 1 and avg > 0, (text, count)
    categories = {t for (t,) in con.execute("SELECT text FROM NVTX_EVENTS WHERE eventType = 33")}
    assert {"phase: Train", "phase: Test", "phase: Predict"} <= categories
    range_texts = {t for (t,) in con.execute("SELECT text FROM NVTX_EVENTS WHERE eventType IN (59, 60)")}
    assert "Train" in range_texts and not categories & range_texts


def test_profile_range_in_tf_profiler_trace_and_recording(tmp_path):
    """Issue 10: the profile range (profile_batches) goes through the host-range
    adapter like the callback's other ranges, so TensorFlow's profiler trace has it too (it
    was started with raw NVTX calls, which TraceMe never saw), around the profiled steps in
    the recording, its message still a registered string (``textId``, as nsys's capture
    range needs)."""
    import tensorflow as tf
    from test_tf_profiler import _host_events  # how the .xplane.pb host plane is read

    x, y = _data()
    model = _model()
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)  # traced before the profiler starts
    cb = NVTXCallback(profile_batches=(1, 2))
    with capture(keep=True) as rec:
        tf.profiler.experimental.start(str(tmp_path / "trace"))
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[cb])
        tf.profiler.experimental.stop()
    events = _host_events(tmp_path / "trace")
    traced = [(duration, stats) for name, _line, duration, stats in events if name == "profile"]
    assert len(traced) == 1 and traced[0][0] > 0 and traced[0][1].get("domain") == "Keras", traced
    (profile,) = rec.find(message="profile", domain="Keras")
    assert profile.color == DEFAULT_COLORS["train"]
    inside = sorted(
        b.payload
        for b in rec.find(domain="Keras", category="phase: Train")
        if profile.start_ns <= b.start_ns <= b.end_ns <= profile.end_ns
    )
    assert inside == [1, 2]
    assert not rec.open_ranges and cb.open_ranges == []
    out = tmp_path / "rec.sqlite"
    try:
        export_sqlite(rec.directory, out)
    finally:
        shutil.rmtree(rec.directory, ignore_errors=True)
    rows = sqlite3.connect(out).execute(
        "SELECT e.text FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId WHERE s.value = 'profile'"
    )
    assert [text for (text,) in rows] == [None]

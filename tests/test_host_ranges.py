"""nvtx_plugins_tf._host_ranges: the host-side range adapter of NVTXCallback and NVTXHook.

Real NVTX calls (libnvtx_host.so -> NVTX C API -> our recorder), checked with capture();
and, when Nsight Systems 2022.4.2 can be fetched (build_tools/fetch_nsys.py), under the
real nsys: NVTXCallback's and NVTXHook's ranges are in its NVTX_EVENTS (through the
``nvtx`` package they were not).
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from nvtx_plugins_tf import _host_ranges
from nvtx_plugins_tf.testing import capture

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "nvtx_plugins_tf"


def test_domains_are_process_wide_and_active_under_the_recorder():
    a, b = _host_ranges.domain("HR-one"), _host_ranges.domain("HR-one")
    assert a is b and a.active and a.name == "HR-one"
    assert _host_ranges.domain(None) is _host_ranges.domain(None)
    assert _host_ranges.tool_attached()
    with pytest.raises(TypeError):
        _host_ranges.domain(3)


def test_start_end_across_threads_with_payload_color_category():
    d = _host_ranges.domain("HR-threads")
    cat = d.category("phase: Work")
    assert d.category("phase: Work") == cat == 1 and d.category("other") == 2
    ids, tids = [], {}

    def begin(i):
        tids.setdefault("start", threading.get_native_id())
        ids.append(d.start(f"job {i}", 0xFF112233, cat, -(2**62) + i))

    def finish():
        tids["end"] = threading.get_native_id()
        for rid in ids:
            d.end(rid)

    with capture() as rec:
        for target, args in ((begin, (0,)), (begin, (1,)), (finish, ())):
            t = threading.Thread(target=target, args=args)
            t.start()
            t.join()
    jobs = sorted(rec.find(domain="HR-threads"), key=lambda r: r.message)
    assert [r.message for r in jobs] == ["job 0", "job 1"]
    for i, r in enumerate(jobs):
        assert r.kind == "start-end"
        assert r.payload == -(2**62) + i and r.payload_type == "i64"
        assert r.color == 0xFF112233
        assert r.category == 1 and r.category_name == "phase: Work"
        assert r.end_tid != r.tid  # ended on the third thread
    assert not rec.open_ranges


def test_no_payload_no_color_no_category_and_default_domain():
    d = _host_ranges.domain(None)
    with capture() as rec:
        d.end(d.start("HR plain"))
    (r,) = rec.find(message="HR plain")
    assert r.domain == "" and r.payload is None and r.category in (None, 0) and r.color in (None, 0)


def test_push_pop_nest_and_marks():
    d = _host_ranges.domain("HR-push")
    with capture() as rec:
        d.push("outer", _host_ranges.color("green"))
        d.push("inner", 0, 0, 7)
        d.mark("tick", 0, 0, 3)
        d.pop()
        d.pop()
    (outer,) = rec.find(message="outer", domain="HR-push")
    (inner,) = rec.find(message="inner", domain="HR-push")
    assert outer.kind == inner.kind == "push-pop"
    assert outer.start_ns <= inner.start_ns <= inner.end_ns <= outer.end_ns
    assert inner.depth == outer.depth + 1 and inner.payload == 7
    assert outer.color & 0xFFFFFF == 0x008000
    (tick,) = [m for m in rec.marks if m.domain == "HR-push"]
    assert tick.message == "tick" and tick.payload == 3


def test_same_text_with_other_attributes_is_its_own_event():
    d = _host_ranges.domain("HR-attrs")
    with capture() as rec:
        for color, category in ((0xFF000001, 0), (0xFF000002, 0), (0xFF000001, d.category("c"))):
            d.end(d.start("same", color, category))
    got = sorted((r.color, r.category or 0) for r in rec.find(message="same", domain="HR-attrs"))
    assert got == [(0xFF000001, 0), (0xFF000001, 1), (0xFF000002, 0)]
    assert d.cached_strings == 1  # one registered string, three events built on it


def test_string_cache_is_bounded_and_evicted_names_still_record():
    d = _host_ranges.domain("HR-bound")
    saved, d.max_strings = d.max_strings, 16
    try:
        with capture() as rec:
            for round_ in range(2):  # the second round re-registers what the first evicted
                for i in range(40):
                    d.end(d.start(f"name {i}", 0, 0, round_))
                    assert d.cached_strings <= 16
        assert d.cached_strings == 16
        assert list(d._strings) == [f"name {i}" for i in range(24, 40)]  # the newest, oldest dropped first
    finally:
        d.max_strings = saved
    names = sorted((r.message, r.payload) for r in rec.find(domain="HR-bound"))
    assert names == sorted((f"name {i}", k) for i in range(40) for k in range(2))


def test_argument_checks():
    d = _host_ranges.domain("HR-checks")
    with pytest.raises(ValueError):
        d.start("a\0b")
    with pytest.raises(TypeError):
        d.start(b"bytes")
    with pytest.raises(ValueError):
        d.start("x", color=2**32)
    with pytest.raises(ValueError):
        d.start("x", category=-1)
    with pytest.raises(ValueError):
        d.start("x", color=True)
    assert _host_ranges.color(None) == 0
    assert _host_ranges.color(0xFF00FF00) == 0xFF00FF00
    assert _host_ranges.color("red") == 0xFF0000  # the nvtx package's value for its names
    with pytest.raises(ValueError):
        _host_ranges.color(-1)
    with pytest.raises(ValueError):
        _host_ranges.color("no-such-color-name")
    with pytest.raises(TypeError):
        _host_ranges.color(1.5)


# ------------------------------------------------------------------------------ subprocesses
def _run(code: str, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_callback_and_hook_work_without_the_nvtx_package(child_env, tmp_path):
    """``nvtx`` made unimportable: the callback and the hook still import and record."""
    code = """
        import sys
        sys.modules["nvtx"] = None  # any `import nvtx...` now raises ImportError
        import numpy as np
        from nvtx_plugins_tf.keras import keras
        from nvtx_plugins_tf.keras.callbacks import NVTXCallback
        from nvtx_plugins_tf.hooks import NVTXHook
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        x = np.zeros((8, 2), "float32")
        model.fit(x, x[:, :1], batch_size=4, epochs=1, verbose=0, callbacks=[NVTXCallback()])
        hook = NVTXHook(name="Session", domain_name="Hook")
        hook.begin(); hook.after_create_session(None, None)
        hook.before_run(None); hook.after_run(None, None); hook.end(None)
        loaded = sorted(m for m in sys.modules if m == "nvtx" or m.startswith("nvtx."))
        print("NVTX_MODULES", [m for m in loaded if sys.modules[m] is not None])
    """
    proc = _run(code, child_env(recording=tmp_path / "rec"))
    assert "NVTX_MODULES []" in proc.stdout
    from nvtx_plugins_tf.recorder import load

    ranges = load(tmp_path / "rec").events
    got = sorted((r.domain, r.message) for r in ranges if r.domain in ("Keras", "Hook"))
    assert got == [
        ("Hook", "Session"),
        ("Hook", "step 0"),
        ("Keras", "Train"),
        ("Keras", "batch 0"),
        ("Keras", "batch 1"),
        ("Keras", "epoch 0"),
    ]


def test_no_private_nvtx_imports_in_the_package():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\bnvtx\._lib\b|from\s+nvtx\s+import\s+_lib", line):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not offenders, "\n".join(offenders)
    for module in ("keras/callbacks.py", "hooks.py", "_host_ranges.py"):
        text = (PACKAGE / module).read_text()
        assert not re.search(r"^\s*(import nvtx\b|from nvtx\b)", text, re.M), module


def test_nvtx_disable_emits_nothing(child_env, tmp_path):
    code = """
        import sys
        from nvtx_plugins_tf import _host_ranges
        from nvtx_plugins_tf.keras.callbacks import NVTXCallback
        cb = NVTXCallback()
        cb.on_train_begin(); cb.on_train_batch_begin(0); cb.on_train_batch_end(0); cb.on_train_end()
        d = _host_ranges.domain("Disabled")
        d.end(d.start("x")); d.push("y"); d.pop(); d.mark("z")
        print("ACTIVE", cb._active, d.active, _host_ranges.tool_attached(), _host_ranges._lib is None)
    """
    proc = _run(code, child_env(recording=tmp_path / "rec", NVTX_DISABLE="1"))
    assert "ACTIVE False False False True" in proc.stdout  # the library is not even loaded
    from nvtx_plugins_tf.recorder import load

    try:
        ranges = load(tmp_path / "rec").events
    except Exception:  # noqa: BLE001 - nothing recorded at all is fine too
        ranges = []
    assert not [r for r in ranges if r.domain in ("Keras", "Disabled")]


def test_no_tool_is_inactive(child_env):
    code = """
        from nvtx_plugins_tf import _host_ranges
        d = _host_ranges.domain("Nobody")
        print("STATE", d.active, _host_ranges.tool_attached(), d.start("x"), d.category("c"))
    """
    proc = _run(code, child_env())
    assert "STATE False False 0 0" in proc.stdout


# ------------------------------------------------------------------------------ real nsys
_NSYS_SCRIPT = """
import numpy as np
from nvtx_plugins_tf.keras import keras
from nvtx_plugins_tf.keras.callbacks import NVTXCallback
from nvtx_plugins_tf.hooks import NVTXHook

model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
x = np.random.default_rng(0).normal(size=(32, 4)).astype("float32")
model.fit(x, x[:, :1], batch_size=8, epochs=2, verbose=0, callbacks=[NVTXCallback()])
model.predict(x, batch_size=16, verbose=0, callbacks=[NVTXCallback()])
hook = NVTXHook(name="Session", domain_name="Hooks")
hook.begin()
hook.after_create_session(None, None)
for _ in range(3):
    hook.before_run(None)
    hook.after_run(None, None)
hook.end(None)
"""


def test_callback_and_hook_ranges_visible_in_real_nsys(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        import nsys_oracle as oracle
    finally:
        sys.path.pop(0)
    try:
        nsys = oracle.nsys_or_skip()
    except pytest.skip.Exception as exc:
        print(f"skipped: {exc}")
        raise
    script = tmp_path / "workload.py"
    script.write_text(_NSYS_SCRIPT)
    env = oracle.clean_env(PYTHONPATH=str(ROOT))
    run = oracle.run_nsys(nsys, [oracle.PYTHON, script], tmp_path / "cb", env=env)
    trace = oracle.load(run.sqlite)
    by_key = trace.by_key()
    count = {k: len(v) for k, v in by_key.items()}
    assert count.get(("Keras", "Train", "startend")) == 1, oracle.describe(trace)
    assert count.get(("Keras", "Predict", "startend")) == 1
    for epoch in range(2):
        (ep,) = by_key[("Keras", f"epoch {epoch}", "startend")]
        assert ep.payload == ("int64Value", epoch)
    for batch in range(4):
        events = by_key[("Keras", f"batch {batch}", "startend")]
        assert len(events) == 2 + (batch < 2)  # 2 epochs of 4 train batches, 2 predict batches
        assert all(e.payload == ("int64Value", batch) and e.end is not None for e in events)
    categories = {name: cid for domain, cid, name in trace.categories if domain == "Keras"}
    assert {"phase: Train", "phase: Predict"} <= set(categories)
    train_batches = [
        e
        for k, v in by_key.items()
        if k[0] == "Keras" and k[1].startswith("batch")
        for e in v
        if e.category == categories["phase: Train"]
    ]
    assert len(train_batches) == 8
    assert all(e.color == 0xFF17BECF for e in train_batches)
    assert count.get(("Hooks", "Session", "startend")) == 1
    assert [count.get(("Hooks", f"step {i}", "startend")) for i in range(3)] == [1, 1, 1]

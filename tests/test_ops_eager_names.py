"""A name per eager step costs what a fixed name costs (issue 37, row 2).

TensorFlow's eager runtime keeps one kernel per distinct set of an op's attributes for the
life of the process; with the texts as attributes, ``with ops.range(f"step {i}")`` built a
kernel per step (about 78 KB each, never freed, and 2.6x the step time). Eagerly the texts
are a ``text`` input now: asserted structurally by counting the NVTX kernels TensorFlow
builds (the library's ``nvtx_tf_kernels_built``), and by the names the recorder gets.
"""

import ctypes

import tensorflow as tf

import nvtx_plugins_tf as nvtx_tf
from nvtx_plugins_tf.ops import _loader
from nvtx_plugins_tf.testing import capture

STEPS = 200


def _kernels_built() -> int:
    nvtx_tf.ops.load_library()
    library = ctypes.CDLL(str(_loader.library_path()))
    library.nvtx_tf_kernels_built.restype = ctypes.c_int64
    return library.nvtx_tf_kernels_built()


def _eager_loop(steps: int, offset: int) -> None:
    w = tf.Variable(tf.ones([2, 2]))
    tape_steps = max(1, steps // 10)
    for i in range(offset, offset + steps):
        with nvtx_tf.ops.range(f"step {i}", domain_name="Eager", payload=i):
            x, ctx = nvtx_tf.ops.start(tf.ones([2, 2]), f"inner {i}", domain_name="Eager")
            nvtx_tf.ops.mark(f"mark {i}", domain_name="Eager")
            w.assign_add(nvtx_tf.ops.end(x, ctx) * 0.0)
        if i - offset < tape_steps:  # backward ranges named per step too
            with tf.GradientTape() as tape:
                y, ctx = nvtx_tf.ops.start(w * 1.0, f"fwd {i}", domain_name="Eager", grad_message=f"bwd {i}")
                y = nvtx_tf.ops.end(tf.reduce_sum(y * y), ctx)
            tape.gradient(y, w)


def test_a_name_per_eager_step_builds_no_kernel_per_step():
    _eager_loop(20, 0)  # warm: the kernels every step uses are built
    before = _kernels_built()
    _eager_loop(STEPS, 1000)
    built = _kernels_built() - before
    # One per distinct (op, dtypes) at most, whatever the names; was > STEPS * 3.
    assert built < 20, f"{built} NVTX kernels built for {STEPS} eager steps with a name each"


def test_eager_texts_reach_the_recorder():
    with capture() as rec:
        _eager_loop(3, 7)
    for i in (7, 8, 9):
        assert rec.count(message=f"step {i}", domain="Eager") == 1
        assert rec.count(message=f"inner {i}", domain="Eager") == 1
        assert [r.payload for r in rec.find(message=f"step {i}", domain="Eager")] == [i]
    assert rec.count(message="fwd 7", domain="Eager") == 1
    assert rec.count(message="bwd 7", domain="Eager") == 1
    assert len([m for m in rec.marks if m.message == "mark 8"]) == 1
    assert not rec.open_ranges, rec.open_ranges


def test_graph_ops_keep_their_texts_as_attributes():
    """In a graph the texts stay attributes (readable in the GraphDef, as saved graphs have them)."""

    @tf.function
    def step(x):
        with nvtx_tf.ops.range("in graph", domain_name="G"):
            y, ctx = nvtx_tf.ops.start(x, "threaded", domain_name="G", grad_message="threaded grad")
            return nvtx_tf.ops.end(y * 2.0, ctx)

    graph = step.get_concrete_function(tf.ones([2])).graph
    nvtx = [op for op in graph.get_operations() if op.type.startswith("Nvtx")]
    assert {op.get_attr("num_text") for op in nvtx} == {0}
    assert {op.get_attr("message") for op in nvtx if op.type == "NvtxStart"} == {b"in graph", b"threaded"}
    assert {op.get_attr("grad_message") for op in nvtx if op.type == "NvtxEnd"} >= {b"threaded grad"}

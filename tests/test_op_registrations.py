"""The op library's registrations, asserted structurally (the GPU kernels cannot run here):
which ops are stateful, and where each GPU kernel keeps its tensors."""

import pytest
from tensorflow.python.framework import kernels, op_def_registry

import nvtx_plugins_tf as nvtx_tf

HOST_MEMORY = {
    "NvtxStart": {"host_inputs", "host_outputs", "payload", "range_id"},
    "NvtxBackwardStart": {"host_inputs", "host_outputs", "payload", "range_id"},
    "NvtxEnd": {"host_inputs", "host_outputs", "range_id"},
    "NvtxBackwardEnd": {"host_inputs", "host_outputs", "range_id"},
    "NvtxMark": {"host_inputs", "host_outputs", "payload"},
}


@pytest.fixture(scope="module", autouse=True)
def _library():
    nvtx_tf.ops.load_library()


@pytest.mark.parametrize("op", sorted(HOST_MEMORY))
def test_cpu_and_gpu_kernels_with_host_memory_arguments(op):
    registered = {k.device_type: set(k.host_memory_arg) for k in kernels.get_registered_kernels_for_op(op).kernel}
    assert set(registered) == {"CPU", "GPU"}
    assert registered["GPU"] == HOST_MEMORY[op]


def test_forward_ops_are_stateful_backward_ops_are_not():
    """Forward ops always run; backward ops run only when the gradients they carry are
    used (gradients.py: a stateful backward op would keep pruned gradients alive)."""
    stateful = {op: op_def_registry.get(op).is_stateful for op in HOST_MEMORY}
    assert stateful == {
        "NvtxStart": True,
        "NvtxEnd": True,
        "NvtxMark": True,
        "NvtxBackwardStart": False,
        "NvtxBackwardEnd": False,
    }


def test_graphs_saved_before_text_inputs_and_emit_load_and_run():
    """NodeDefs as earlier versions wrote them (no ``num_text``, no ``emit``) import and run."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        x = tf.constant([1.0, 2.0])
        y, ctx = nvtx_tf.ops.start(x, "old", domain_name="Old")
        nvtx_tf.ops.end(y * 2.0, ctx, name="out")
    graph_def = graph.as_graph_def()
    for node in graph_def.node:
        if node.op.startswith("Nvtx"):
            assert "num_text" in node.attr and "emit" in node.attr
            del node.attr["num_text"]
            del node.attr["emit"]
    old = tf.Graph()
    with old.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
        out = next(op for op in old.get_operations() if op.type == "NvtxEnd").outputs[0]
        with tf.compat.v1.Session(graph=old) as session:
            assert session.run(out).tolist() == [2.0, 4.0]

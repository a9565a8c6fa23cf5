"""Keep the NVTX ops out of ``tf.function``'s program-order chain of side effects.

``tf.function`` runs stateful ops that touch no resource in program order: each gets a
control edge from the previous one (automatic control dependencies). Our forward ops are
stateful (so that they always run), and in that chain they would reorder the program:
a user's stateful op written after a range would wait for the tensors the range carries,
parallel branches would be serialized, and every op would carry one more edge for the
executor to process. The data they carry already orders a range with the work it
annotates, so an NVTX op with an output is declared to read a key of its own (its first
output): it then has a "resource" no other op uses, no chain edge, and still runs.
NvtxMark/NvtxEnd with no tensor at all keep the chain (their only order).
"""

from __future__ import annotations

from tensorflow.python.framework import auto_control_deps

_NVTX_OP_TYPES = frozenset({"NvtxStart", "NvtxEnd", "NvtxMark"})
_installed = False


def _resolver(op, resource_reads, resource_writes) -> bool:
    if op.type not in _NVTX_OP_TYPES or not op.outputs:
        return False
    key = op.outputs[0]
    if key in resource_reads:
        return False
    resource_reads.add(key)
    return True


def install() -> None:
    """Register the resolver once per process."""
    global _installed
    if not _installed:
        auto_control_deps.register_acd_resource_resolver(_resolver)
        _installed = True

"""The end of a range around the user's tensors: the NvtxEnd (:func:`._raw.end_op`), and what
Keras reads of the tensors afterwards kept (:func:`._structure.keep_producer`): their
``_keras_logits``/``_keras_mask``, and a Softmax/Sigmoid stays the op that made the returned
tensor (its input goes through the NvtxEnd), so a crossentropy computes from the same logits
as in the plain model, whose gradient opens the range's backward range
(:func:`.gradients.logits_beside`). Above both _raw and gradients, which imports _raw."""

from __future__ import annotations

from nvtx_plugins_tf.ops import _raw, _structure, gradients

__all__ = ["end_op"]


def end_op(flat, range_id, domain_name, grad_message="", grad_domain_name="", name=None):
    """:func:`._raw.end_op` of ``flat``, what Keras reads of them kept (see the module)."""
    return _structure.keep_producer(
        flat,
        lambda routed: _raw.end_op(routed, range_id, domain_name, grad_message, grad_domain_name, name),
        lambda logits, raw: gradients.logits_beside(logits, raw[0].op),
    )

"""Graph-build-time checks of the public arguments: TypeError/ValueError naming them."""

from __future__ import annotations

import numbers
from typing import Any

_UINT32_MAX = 0xFFFFFFFF

#: The longest text (message, domain name), in UTF-8 bytes, that the ops accept: NVTX tools
#: store a name whole only up to a limit (the package's recorder cuts a text to fit its chunk,
#: 256 KiB by default); longer is refused rather than cut.
MAX_TEXT_BYTES = 65536


def message(value: Any, argument: str) -> str:
    """A text given to NVTX: a str without NUL, UTF-8 encodable, at most MAX_TEXT_BYTES."""
    if not isinstance(value, str):
        raise TypeError(f"{argument} must be a str, got {type(value).__name__}")
    if "\0" in value:
        raise ValueError(f"{argument} must not contain NUL characters")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{argument} must be encodable as UTF-8: "
            f"it has the lone surrogate {value[exc.start]!r} at index {exc.start}"
        ) from None
    if size > MAX_TEXT_BYTES:
        raise ValueError(f"{argument} is {size} bytes in UTF-8; at most {MAX_TEXT_BYTES} are accepted")
    return value


def name(value: Any, argument: str) -> str:
    """A range's or mark's name: a :func:`message` that is not empty."""
    value = message(value, argument)
    if not value:
        raise ValueError(f"{argument} must not be empty (NVTX would record a range without a name)")
    return value


def optional_message(value: Any, argument: str, default: str | None) -> str | None:
    return default if value is None else message(value, argument)


def domain(value: Any, argument: str) -> str:
    """A domain name; None and '' both mean NVTX's default domain."""
    if value is None:
        return ""
    return message(value, argument)


def color(value: Any, argument: str = "color") -> int:
    """0 (no color) or a 32-bit ARGB value; names as the ``nvtx`` package knows them."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise TypeError(f"{argument} must be a color name or an ARGB int, got bool")
    if isinstance(value, numbers.Integral):
        if not 0 <= int(value) <= _UINT32_MAX:
            raise ValueError(f"{argument} must be an ARGB value in [0, 0xFFFFFFFF], got {value}")
        return int(value)
    if isinstance(value, str):
        from nvtx.colors import color_to_hex

        try:
            argb = color_to_hex(value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{argument}: unknown color {value!r}") from exc
        return int(argb) & _UINT32_MAX
    raise TypeError(f"{argument} must be a color name or an ARGB int, got {type(value).__name__}")


def category(value: Any, argument: str = "category") -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{argument} must be an int, got {type(value).__name__}")
    if not 0 <= int(value) <= _UINT32_MAX:
        raise ValueError(f"{argument} must be in [0, 2**32), got {value}")
    return int(value)


def payload(value: Any, argument: str = "payload"):
    """None, a Python int, or an integer scalar tensor; returns a list for the op input."""
    if value is None:
        return []
    import tensorflow as tf

    if isinstance(value, bool):
        raise TypeError(f"{argument} must be an int or an int64 scalar tensor, got bool")
    if isinstance(value, numbers.Integral):
        if not -(2**63) <= int(value) < 2**63:
            raise ValueError(f"{argument} must fit in int64, got {value}")
        return [tf.constant(int(value), tf.int64)]
    if isinstance(value, (tf.Tensor, tf.Variable)):
        if not value.dtype.is_integer:
            raise TypeError(f"{argument} must be an integer tensor, got dtype {value.dtype.name}")
        if value.dtype == tf.uint64:
            raise TypeError(
                f"{argument}: a uint64 tensor may hold values above 2**63-1, which the int64 payload "
                "cannot hold (they would wrap negative); cast it to int64 where its values fit"
            )
        if value.shape.rank not in (None, 0):
            raise ValueError(f"{argument} must be a scalar, got shape {value.shape}")
        return [tf.cast(value, tf.int64)]
    raise TypeError(f"{argument} must be an int or an int64 scalar tensor, got {type(value).__name__}")


def boolean(value: Any, argument: str) -> bool:
    if not isinstance(value, (bool, int)):
        raise TypeError(f"{argument} must be a bool, got {type(value).__name__}")
    return bool(value)

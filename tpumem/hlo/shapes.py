"""XLA shapes as XLA prints them (`f32[512,512]{1,0}`, TPU tiles as
`{1,0:T(8,128)}`), and the bytes their elements take without layout padding."""

from __future__ import annotations

import math
from typing import Any

# xla.PrimitiveType: wire value -> (name as XLA prints it, bits per element).
PRIMITIVE_TYPES: dict[int, tuple[str, int]] = {
    1: ("pred", 8),
    2: ("s8", 8),
    3: ("s16", 16),
    4: ("s32", 32),
    5: ("s64", 64),
    6: ("u8", 8),
    7: ("u16", 16),
    8: ("u32", 32),
    9: ("u64", 64),
    10: ("f16", 16),
    11: ("f32", 32),
    12: ("f64", 64),
    13: ("tuple", 0),
    14: ("opaque", 0),
    15: ("c64", 64),
    16: ("bf16", 16),
    17: ("token", 0),
    18: ("c128", 128),
    19: ("f8e5m2", 8),
    20: ("f8e4m3fn", 8),
    21: ("s4", 4),
    22: ("u4", 4),
    23: ("f8e4m3b11fnuz", 8),
    24: ("f8e5m2fnuz", 8),
    25: ("f8e4m3fnuz", 8),
    26: ("s2", 2),
    27: ("u2", 2),
    28: ("f8e4m3", 8),
    29: ("f8e3m4", 8),
    30: ("s1", 1),
    31: ("u1", 1),
    32: ("f4e2m1fn", 4),
    33: ("f8e8m0fnu", 8),
    34: ("buffer", 0),
}
TUPLE, TOKEN, OPAQUE = 13, 17, 14
POINTER_BYTES = 8  # a tuple's buffer is a table of pointers to its elements
_COMBINED = -1  # a tile dimension that combines the dimensions it covers, printed "*"


def element_name(element_type: int) -> str:
    return PRIMITIVE_TYPES.get(element_type, (f"type{element_type}", 0))[0]


# XLA's element names as numpy (and so JAX, PyTorch and TensorFlow) name them,
# which is how a trace's rows name a buffer's dtype.
_NUMPY_NAMES = {"pred": "bool", "bf16": "bfloat16", "c64": "complex64", "c128": "complex128"}
_NUMPY_PREFIXES = {"s": "int", "u": "uint", "f": "float"}


def numpy_dtype(xla_name: str) -> str:
    """`f32` as `float32`, `s8` as `int8`, `pred` as `bool`; others as they are."""
    if xla_name in _NUMPY_NAMES:
        return _NUMPY_NAMES[xla_name]
    prefix, bits = xla_name[:1], xla_name[1:]
    if prefix in _NUMPY_PREFIXES and bits.isdigit():
        return _NUMPY_PREFIXES[prefix] + bits
    return xla_name


def subshape(shape: Any, index: list[int] | tuple[int, ...]) -> Any:
    """The shape at a shape index (a tuple element), as XProf resolves it: the last
    index into the outer tuple, else the shape itself."""
    if index and shape.element_type == TUPLE and index[-1] < len(shape.tuple_shapes):
        return shape.tuple_shapes[index[-1]]
    return shape


def shape_text(shape: Any) -> str:
    """XLA's ShapeUtil::HumanStringWithLayout."""
    if shape.element_type == TUPLE:
        return "(" + ", ".join(shape_text(element) for element in shape.tuple_shapes) + ")"
    name = element_name(shape.element_type)
    if shape.element_type in (TOKEN, OPAQUE):
        return name
    dynamic = list(shape.is_dynamic_dimension)
    dims = ",".join(
        ("<=" if i < len(dynamic) and dynamic[i] else "") + str(d)
        for i, d in enumerate(shape.dimensions)
    )
    text = f"{name}[{dims}]"
    if shape.HasField("layout"):
        layout = _layout_text(shape.layout)
        if shape.dimensions or layout != "{}":
            text += layout
    return text


def _layout_text(layout: Any) -> str:
    """XLA's Layout::ToString for the parts tpumem reads."""
    extras = []
    if layout.tiles:
        extras.append(
            "".join(
                "(" + ",".join("*" if d == _COMBINED else str(d) for d in tile.dimensions) + ")"
                for tile in layout.tiles
            ).join(("T", ""))
        )
    if layout.tail_padding_alignment_in_elements not in (0, 1):
        extras.append(f"L({layout.tail_padding_alignment_in_elements})")
    if layout.element_size_in_bits:
        extras.append(f"E({layout.element_size_in_bits})")
    if layout.memory_space:
        extras.append(f"S({layout.memory_space})")
    minor_to_major = ",".join(str(d) for d in layout.minor_to_major)
    return "{" + minor_to_major + (":" + "".join(extras) if extras else "") + "}"


def unpadded_bytes(shape: Any) -> int:
    """Bytes of the elements without layout padding (a tuple: its pointer table)."""
    if shape.element_type == TUPLE:
        return POINTER_BYTES * len(shape.tuple_shapes)
    bits = PRIMITIVE_TYPES.get(shape.element_type, ("", 0))[1]
    return math.ceil(math.prod(shape.dimensions) * bits / 8)


def dims_text(shape: Any) -> str:
    """The dimensions as tpumem's traces write shapes: `[512,512]`."""
    if shape.element_type == TUPLE:
        return "(" + ", ".join(dims_text(e) for e in shape.tuple_shapes) + ")"
    return "[" + ",".join(str(d) for d in shape.dimensions) + "]"

"""The Triton interpreter (TRITON_INTERPRET=1) on a CPU, with its two bf16 bugs fixed.

triton-lang/triton#11584: the interpreter stores bfloat16 as raw uint16 and its `create_dot` feeds those
bit patterns straight to numpy's matmul, so a bf16 x bf16 dot returns garbage. We widen bf16 operands
to float32 first, which is what the GPU's tensor cores compute (bf16 products, fp32 accumulation).

Second, the interpreter narrows float32 to bfloat16 by truncation (and its "rtne" path is wrong too),
where the GPU rounds to nearest even; outputs come out biased low by up to a bf16 step, enough to fail
the 1e-2 rule on a few elements. We round to nearest even, NaN kept as a quiet NaN.
This module is the one place the workarounds live; the evaluator calls `prepare_interpreter()`.
"""

from __future__ import annotations

import os
from typing import Any

_PATCHED = False


def prepare_interpreter() -> None:
    """Turn the interpreter on for this process and install the bf16 dot fix (idempotent)."""
    os.environ["TRITON_INTERPRET"] = "1"
    patch_bf16_dot()
    patch_bf16_rounding()


def fp32_to_bf16_bits(x):
    """float32 numpy array -> uint16 bf16 bit patterns, rounded to nearest even."""
    import numpy as np

    x = np.ascontiguousarray(x, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded)


_ROUNDING_PATCHED = False


def patch_bf16_rounding() -> None:
    global _ROUNDING_PATCHED
    if _ROUNDING_PATCHED:
        return
    import triton.language as tl
    from triton.runtime import interpreter as interp

    builder = interp.InterpreterBuilder
    cast_original, fp_to_fp_original = builder.cast_impl, builder.create_fp_to_fp

    def narrowing(src: Any, dst_type: Any) -> bool:
        return src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16

    def cast_impl(self, src, dst_type):
        if narrowing(src, dst_type):
            return interp.TensorHandle(fp32_to_bf16_bits(src.data), dst_type.scalar)
        return cast_original(self, src, dst_type)

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        if narrowing(src, dst_type):
            return interp.TensorHandle(fp32_to_bf16_bits(src.data), dst_type.scalar)
        return fp_to_fp_original(self, src, dst_type, rounding_mode)

    builder.cast_impl = cast_impl
    builder.create_fp_trunc = lambda self, src, dst_type: self.cast_impl(src, dst_type)
    builder.create_fp_to_fp = create_fp_to_fp
    _ROUNDING_PATCHED = True


def patch_bf16_dot() -> None:
    global _PATCHED
    if _PATCHED:
        return
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter as interp

    original = interp.InterpreterBuilder.create_dot

    def widen(handle):
        if handle.dtype.scalar == tl.bfloat16 or getattr(handle.dtype, "element_ty", None) == tl.bfloat16:
            data = interp._convert_float(handle.data, tl.bfloat16, tl.float32, None).view(np.float32)
            return interp.TensorHandle(data, tl.float32)
        return handle

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return original(self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)

    interp.InterpreterBuilder.create_dot = create_dot
    _PATCHED = True

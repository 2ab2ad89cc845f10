"""The Triton interpreter (TRITON_INTERPRET=1) on a CPU, with its bf16 `tl.dot` bug fixed.

triton-lang/triton#11584: the interpreter stores bfloat16 as raw uint16 and its `create_dot` feeds those
bit patterns straight to numpy's matmul, so a bf16 x bf16 dot returns garbage. We widen bf16 operands
to float32 first, which is what the GPU's tensor cores compute (bf16 products, fp32 accumulation).
This module is the one place the workaround lives; the evaluator calls `prepare_interpreter()`.
"""

from __future__ import annotations

import os

_PATCHED = False


def interpreter_enabled() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def prepare_interpreter() -> None:
    """Turn the interpreter on for this process and install the bf16 dot fix (idempotent)."""
    os.environ["TRITON_INTERPRET"] = "1"
    patch_bf16_dot()


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

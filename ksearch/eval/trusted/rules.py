"""Correctness rules: type, device, shape, dtype, finiteness, then an element rule.

rule="flashinfer" (FlashInfer-Bench's, the default): an element fails only where |x - y| > atol AND
|x - y| / (|y| + 1e-8) > rtol (passing either test is enough). rule="allclose" (torch.allclose's, which
GPUMode uses): an element fails where |x - y| > atol + rtol * |y|. An output passes when the fraction of passing elements is at least `required_matched_ratio`.
Outputs must be plain torch.Tensor objects (a subclass could intercept the checker's own operations)
on the reference's device. The comparison runs on that device; only a few scalars move to the host.
Pure torch (and the typed statuses); nothing heavier, so worker processes stay light.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ksearch.eval.report import Status


@dataclass
class CheckResult:
    status: Status                    # PASSED | INCORRECT_SHAPE | INCORRECT_DTYPE | INCORRECT_NUMERICAL
    message: str = ""
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    matched_ratio: float = 1.0

    @property
    def passed(self) -> bool:
        return self.status == Status.PASSED


def normalize_outputs(result: Any, output_names: list[str]) -> list[Any]:
    """Accept one tensor, a tuple/list in output order, or a dict keyed by output name."""
    if isinstance(result, dict):
        missing = [n for n in output_names if n not in result]
        if missing:
            raise ValueError(f"returned dict lacks outputs {missing}")
        return [result[n] for n in output_names]
    if isinstance(result, (tuple, list)):
        if len(result) != len(output_names):
            raise ValueError(f"returned {len(result)} values, expected {len(output_names)} ({output_names})")
        return list(result)
    if len(output_names) == 1:
        return [result]
    raise ValueError(f"returned a single {type(result).__name__}, expected {len(output_names)} outputs {output_names}")


def check_outputs(got: list[Any], want: list[Any], names: list[str], *, atol: float, rtol: float,
                  required_matched_ratio: float = 1.0, rule: str = "flashinfer") -> CheckResult:
    if rule not in ("flashinfer", "allclose"):
        raise ValueError(f"unknown element rule {rule!r}; known: flashinfer, allclose")
    worst = CheckResult(Status.PASSED)
    for name, x, y in zip(names, got, want):
        if type(x) is not torch.Tensor:        # the exact type: subclasses can fake the checks
            what = "a torch.Tensor subclass" if isinstance(x, torch.Tensor) else "not a tensor"
            return CheckResult(Status.INCORRECT_SHAPE, f"{name}: expected a plain torch.Tensor, got "
                                                  f"{type(x).__name__} ({what})")
        if x.device != y.device:
            return CheckResult(Status.INCORRECT_DTYPE, f"{name}: on device {x.device}, expected {y.device}")
        if tuple(x.shape) != tuple(y.shape):
            return CheckResult(Status.INCORRECT_SHAPE, f"{name}: shape {tuple(x.shape)}, expected {tuple(y.shape)}")
        if x.dtype != y.dtype:
            return CheckResult(Status.INCORRECT_DTYPE, f"{name}: dtype {x.dtype}, expected {y.dtype}")
        xf = x.detach().to(torch.float32)
        yf = y.detach().to(torch.float32)
        if xf.numel() == 0:
            continue
        finite = torch.isfinite(xf)
        # Where the reference itself is -inf (an empty sequence's lse) the same value is right.
        same_inf = torch.isinf(yf) & (xf == yf)
        bad_nonfinite = ~(finite | same_inf)
        if bool(bad_nonfinite.any()):
            n = int(bad_nonfinite.sum())
            return CheckResult(Status.INCORRECT_NUMERICAL, f"{name}: {n} non-finite values (NaN/Inf)",
                               float("inf"), float("inf"), 0.0)
        diff = (xf - yf).abs()
        rel = diff / (yf.abs() + 1e-8)
        # Where the reference is not finite only the identical value is right (rel would be NaN there).
        ref_odd = ~torch.isfinite(yf)
        diff = torch.where(same_inf, torch.zeros_like(diff), torch.where(ref_odd, torch.full_like(diff, float("inf")), diff))
        rel = torch.where(same_inf, torch.zeros_like(rel), torch.where(ref_odd, torch.full_like(rel, float("inf")), rel))
        if rule == "allclose":
            failed = diff > atol + rtol * torch.where(ref_odd, torch.zeros_like(yf), yf.abs())
        else:
            failed = (diff > atol) & (rel > rtol)
        ratio = 1.0 - float(failed.sum()) / failed.numel()
        worst.max_abs_error = max(worst.max_abs_error, float(diff.max()))
        worst.max_rel_error = max(worst.max_rel_error, float(rel.max()))
        worst.matched_ratio = min(worst.matched_ratio, ratio)
        if ratio < required_matched_ratio:
            first = tuple(int(i) for i in failed.nonzero()[0].tolist())
            worst.status = Status.INCORRECT_NUMERICAL
            bound = f"atol={atol} + rtol={rtol} * |ref|" if rule == "allclose" else f"atol={atol} and rtol={rtol}"
            worst.message = (f"{name}: {int(failed.sum())} of {failed.numel()} elements outside {bound} "
                             f"(matched {ratio:.6f} < {required_matched_ratio}); first at {first}: "
                             f"got {float(xf[first]):.6g}, expected {float(yf[first]):.6g}")
            return worst
    return worst

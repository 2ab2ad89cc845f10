"""Hardware feedback per evaluation: a typed profile, a compact table of it, and what it suggests.

Collected on a GPU after the judge's timing (ksearch.eval.trusted.judge, `profile`): the candidate's process
reports one profiled call's launches (`launches`) and what its Triton cache says of each compiled kernel
(`triton_cache`, registers and spills from the cubin by `cubin`); the judge bounds all of it and adds what it
knows itself, occupancy from the SM's limits (`occupancy`) and % of the physical limit (`collect`)."""

from ksearch.profile.advice import Advice, Hint, Role, advise, hint_change, knob_role
from ksearch.profile.model import (
                                   CPU_REASON,
                                   KernelInfo,
                                   Launch,
                                   Profile,
                                   ProfileReading,
                                   WorkloadProfile,
                                   context_profile,
                                   read_profile,
)
from ksearch.profile.table import render_profile

__all__ = ["Advice", "CPU_REASON", "Hint", "KernelInfo", "Launch", "Profile", "ProfileReading", "Role",
           "WorkloadProfile", "advise", "context_profile", "hint_change", "knob_role", "read_profile",
           "render_profile"]

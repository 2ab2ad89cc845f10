"""Hardware feedback per evaluation: a typed profile, a compact table of it, and what it suggests."""

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

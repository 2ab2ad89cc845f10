"""Helpers shared by the tasks' FlashInfer baselines."""

import torch

_WORKSPACES: dict[str | torch.device, torch.Tensor] = {}


def flashinfer_workspace(device: str | torch.device) -> torch.Tensor:
    """One 128 MB FlashInfer workspace per device, reused by every wrapper (allocated once, outside timing)."""
    if device not in _WORKSPACES:
        _WORKSPACES[device] = torch.empty(128 * 1024 * 1024, dtype=torch.uint8, device=device)
    return _WORKSPACES[device]

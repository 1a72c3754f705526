"""Which device to run on (`auto` picks the best one this machine has; an explicit choice must exist),
and how much memory it has free."""

import os
from pathlib import Path

import torch

from tinygpt.config.run_config import DEVICES
from tinygpt.errors import UserError

GiB = 2**30


def pick_device(name: str) -> torch.device:
    """auto → cuda, then mps, then cpu; an explicit choice must exist on this machine."""
    if name not in DEVICES:
        raise UserError(f"unknown device {name!r}; use one of {', '.join(DEVICES)}")
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError(
            "device cuda was asked for, but CUDA is not available on this machine "
            f"(torch {torch.__version__}); use device auto or cpu"
        )
    if name == "mps" and not torch.backends.mps.is_available():
        raise UserError(
            "device mps was asked for, but Apple's MPS is not available on this machine; "
            "use device auto or cpu"
        )
    return torch.device(name)


def free_memory(device: torch.device) -> int | None:
    """Bytes free for new tensors on `device`, or None where it cannot be known."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type == "cpu":
        meminfo = Path("/proc/meminfo")
        if meminfo.is_file():  # Linux: what can be had without swapping
            for line in meminfo.read_text().splitlines():
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
        try:  # elsewhere: physical memory
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, ValueError, OSError):
            return None
    return None

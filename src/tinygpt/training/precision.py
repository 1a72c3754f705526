"""How a training process uses its device: the precision (dtype, autocast, loss scaling),
TF32 on CUDA, whether torch.compile works here, and telling out-of-memory from other errors."""

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch

from tinygpt.errors import UserError


def prepare_device(device: torch.device) -> None:
    """Process-wide speed settings for training on `device`."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # TF32 tensor cores for any float32 matmuls
        torch.backends.cudnn.allow_tf32 = True


def cpu_multiplies_bfloat16() -> bool:
    """Whether this CPU has bfloat16 dot-product instructions (x86's AVX-512 BF16; AMX CPUs have them too).

    Without them each bfloat16 matmul runs a much slower path (BENCHMARKS.md).
    """
    probe = getattr(torch.cpu, "_is_avx512_bf16_supported", None)  # torch's own CPU feature check
    return bool(probe and probe())


def resolve_dtype(name: str, device: torch.device) -> str:
    """train.dtype auto → a 16-bit precision where `device` multiplies it natively, else float32.

    bfloat16 on CUDA GPUs with bfloat16 tensor cores (compute capability ≥ 8, Ampere on)
    and on CPUs with bfloat16 instructions; float16 (with loss scaling) on older CUDA GPUs;
    float32 elsewhere (other CPUs, MPS). The model's width is not considered: below about
    64 wide, float32 is as fast on a CPU (BENCHMARKS.md).
    """
    if name != "auto":
        return name
    if device.type == "cuda":
        return "bfloat16" if torch.cuda.get_device_capability(device)[0] >= 8 else "float16"
    if device.type == "cpu" and cpu_multiplies_bfloat16():
        return "bfloat16"
    return "float32"


def autocast_for(device: torch.device, dtype: str) -> AbstractContextManager:
    """The mixed-precision context for a training dtype (float32: none)."""
    if dtype == "float32":
        return nullcontext()
    if dtype == "float16" and device.type == "cpu":
        raise UserError("train.dtype = float16 is not supported on CPU; use bfloat16 or float32")
    return torch.autocast(device_type=device.type, dtype=getattr(torch, dtype))


@dataclass(frozen=True)
class Precision:
    """train.dtype as it runs on one device: the resolved name, its autocast context, its loss scaler."""

    dtype: str
    autocast: AbstractContextManager
    scaler: torch.amp.GradScaler  # scales float16 losses so that small gradients survive; else a no-op


def precision_for(name: str, device: torch.device) -> Precision:
    dtype = resolve_dtype(name, device)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == "float16")
    return Precision(dtype, autocast_for(device, dtype), scaler)


def check_compile_works(device: torch.device) -> None:
    """Compile a two-operation function first, so that a machine without what torch.compile needs
    (a C++ compiler on CPU, Triton on CUDA) stops with one clear message before training starts."""
    try:
        torch.compile(lambda x: torch.relu(x) + 1)(torch.ones(8, device=device))
    except Exception as error:  # whatever fails here would fail the first training step
        reason = next(iter(str(error).strip().splitlines()), type(error).__name__)
        raise UserError(
            f"train.compile is true, but torch.compile does not work on this machine ({reason}); "
            "install what it needs (a C++ compiler for CPU, Triton for CUDA) or set train.compile: false"
        ) from None


def out_of_memory(error: RuntimeError) -> bool:
    """Whether torch's allocator ran out: on CUDA its own exception, on CPU and MPS its message."""
    message = str(error)
    return (
        isinstance(error, torch.cuda.OutOfMemoryError)
        or "can't allocate memory" in message  # CPU
        or "MPS backend out of memory" in message
    )

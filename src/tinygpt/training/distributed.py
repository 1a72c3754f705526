"""Training on several processes: torchrun's environment, the process group, DDP and rank-aware helpers.

torchrun starts one process per device and tells each where it stands through
environment variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
`process_group` reads them and joins the process group: nccl on CUDA (one GPU per
process, cuda:LOCAL_RANK), gloo on CPU. Without torchrun every helper here is a
no-op and training is one process, exactly as before.

What the ranks share and what each keeps to itself:
- weights: DistributedDataParallel broadcasts rank 0's at the start and averages
  gradients across ranks in backward, so every rank takes the same optimizer step;
- batches: each rank draws from its own generator, seeded seed + rank;
- evaluation: the eval batches are dealt out among the ranks and their losses
  summed across ranks, so the number is the one a single process computes;
- files: only rank 0 writes config.yaml, metrics, checkpoints and the progress bar;
- the end: after a job that went well, each rank waits for the others before it
  leaves the group (see `leave_together`).

A rank that fails exits non-zero, and torchrun then stops the others. Every
collective also gives up after TIMEOUT, so a job whose peers vanished (another
machine lost, say) ends with an error instead of waiting for ever.
"""

import importlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TypeVar

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from tinygpt.errors import RankError, UserError

TIMEOUT = timedelta(minutes=10)  # longest wait in one collective: well above a checkpoint save or an eval
T = TypeVar("T")


@dataclass(frozen=True)
class Ranks:
    """This process's place among the training processes, and the device it drives."""

    rank: int = 0  # 0 … world_size-1 over all machines; rank 0 writes the files
    local_rank: int = 0  # 0 … processes on this machine - 1; picks the GPU
    world_size: int = 1  # processes in the job
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model in DistributedDataParallel when there are several ranks, else the model itself."""
        if not self.distributed:
            return model
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=device_ids)

    def sync_gradients(self, model: torch.nn.Module, sync: bool):
        """A context for one micro-step's forward and backward.

        DDP all-reduces gradients in every backward. Micro-steps before the last
        of an accumulation only add to the local gradients, so they skip the
        communication (no_sync); the last one averages the sum across ranks.
        """
        return nullcontext() if sync or not self.distributed else model.no_sync()

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """The tensor summed over all ranks (in place; every rank gets the total)."""
        if self.distributed:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def max(self, tensor: torch.Tensor) -> torch.Tensor:
        """The tensor's largest value over all ranks, elementwise (in place; every rank gets it)."""
        if self.distributed:
            dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return tensor

    def gather(self, tensors: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """Every rank's tensors, by rank (each rank must pass the same names and shapes).

        For the random-generator states a checkpoint keeps per rank. Tensors go
        through all_gather rather than gather_object, which would need NumPy.
        """
        if not self.distributed:
            return [tensors]
        by_rank: list[dict[str, torch.Tensor]] = [{} for _ in range(self.world_size)]
        for name, tensor in tensors.items():
            local = tensor.to(self.device)  # nccl gathers on the GPU, gloo on the CPU
            parts = [torch.empty_like(local) for _ in range(self.world_size)]
            dist.all_gather(parts, local)
            for rank, part in enumerate(parts):
                by_rank[rank][name] = part.cpu()
        return by_rank

    def in_turn(self, work: Callable[[], T]) -> T:
        """Run work on rank 0 first, then on the first rank of each other machine, then on the rest.

        Files made on first use (the built-in corpus, the id cache) are then made
        once per file system, never by two processes at the same time; later
        turns find them made.
        """
        turn = 0 if self.rank == 0 else 1 if self.local_rank == 0 else 2
        result = None
        for current in range(3 if self.distributed else 1):
            if current == turn:
                result = work()
            if self.distributed:
                dist.barrier()
        return result


ONE_PROCESS = Ranks()


def from_environment(device: torch.device) -> Ranks:
    """Ranks from torchrun's variables (one process without them); CUDA becomes cuda:LOCAL_RANK."""
    try:
        rank = int(os.environ.get("RANK", 0))
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        world_size = int(os.environ.get("WORLD_SIZE", 1))
    except ValueError:
        raise UserError(
            "RANK, LOCAL_RANK and WORLD_SIZE must be integers; start several processes with torchrun"
        ) from None
    if device.type == "cuda" and world_size > 1:
        if local_rank >= torch.cuda.device_count():
            raise UserError(
                f"local rank {local_rank} has no GPU: this machine has {torch.cuda.device_count()}; "
                "start at most that many processes per machine (--nproc_per_node)"
            )
        device = torch.device("cuda", local_rank)
    return Ranks(rank, local_rank, world_size, device)


def is_main_process() -> bool:
    """True unless torchrun started this process as a rank other than 0."""
    return os.environ.get("RANK", "0") == "0"


@contextmanager
def process_group(device: torch.device) -> Iterator[Ranks]:
    """Join torchrun's process group for the duration of the block, and leave it however the block ends.

    A UserError is prefixed with the rank that raised it, so a message from one
    process of many says where it came from.
    """
    ranks = from_environment(device)
    if not ranks.distributed:
        yield ranks
        return
    if device.type == "mps":
        raise UserError("training on several processes needs CUDA (nccl) or CPU (gloo); MPS has neither")
    if device.type == "cuda":
        torch.cuda.set_device(ranks.device)
    # DDP imports torch._dynamo. Imported after the group exists, it holds on to the group, and
    # destroy_process_group then leaves gloo's threads running into interpreter shutdown
    # (torch 2.13). Imported first, the group goes with destroy_process_group, threads joined.
    importlib.import_module("torch._dynamo")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=TIMEOUT)
    try:
        yield ranks
        leave_together(ranks)
    except UserError as e:
        raise RankError(f"rank {ranks.rank} of {ranks.world_size}: {e}") from None
    finally:
        dist.destroy_process_group()


def leave_together(ranks: Ranks) -> None:
    """Wait for every rank here at the end of a job that went well, before the group is taken down.

    No rank leaves while another still writes its checkpoints. The wait is also a
    second guard against pytorch/pytorch#190489: gloo's worker threads let go of a
    collective's tensors a moment after it returns, and need the GIL to do it; one
    that asks for it during interpreter shutdown aborts the process (SIGABRT) after
    a run that succeeded. destroy_process_group joins those threads (see the import
    in `process_group`), and while ranks wait here the threads get the GIL. Only on
    success: after an error the other ranks may never arrive.
    """
    dist.barrier(device_ids=[ranks.device.index] if ranks.device.type == "cuda" else None)

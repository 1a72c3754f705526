"""Issue 39 item 3: generation's one-position step on one thread and on two, three ways.

    python benchmarks/split_step.py --rounds 10

The Decoder as tinygpt runs it (on two threads, a 6 × 384 model's products cut into one run of
rows a thread: tinygpt.generation.fused_step), the Decoder with whole products (MKL's own threaded
product, what it ran before the cut), and an earlier experiment, a split over two Python threads.

torch hands both threads to MKL for each of a 6 × 384 step's row-times-matrix products (MKL_VERBOSE
shows NThr:2), yet on AMD's EPYCs two threads generated no faster than one. The experiment splits by hand, as
Megatron-LM splits a layer over devices: each of two threads (this one and a worker, each with
torch on one thread; torch releases the GIL inside its ops) computes half the heads (their q, k, v
columns, their attention, their rows of the output projection) and then half the MLP's hidden
units (columns of c_fc, rows of c_proj); the two partial sums are added. Two hand-offs a layer
where a split of each product would take four. Against tinygpt.generation.fused_step's Decoder,
on the same seeded untrained model, it prints the largest logit difference and, over many short
bursts taken in turn, the best and the median step: the Decoder on 1 and on 2 threads (cut, and
with whole products), the Python split, the weights-read bound at 1 and 2 threads (the
bandwidth of summing a 128 MiB buffer), and, to tell the products from the rest of the step, the
step's 24 products alone (cut as the Decoder cuts them) and the same 24 matrices read (summed), one
call each, as the step reads them.
The Python split is not used by tinygpt: BENCHMARKS.md, "Threads on a busy machine", says what it
measured, and "Issue 39 on an AMD EPYC Zen 3" what the cut gives.
"""

import argparse
import queue
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # runs from a plain checkout too

import torch
import torch.nn.functional as F

from tinygpt.generation.fused_step import Decoder, _matmul
from tinygpt.generation.kv_cache import KVCache
from tinygpt.model import GPT, GPTConfig, one_position_gelu


class Half:
    """One thread's share of a block: half the heads and half the MLP, weights as (in, out)."""

    def __init__(self, block, half: int, C: int, nh: int, hs: int, block_size: int):
        own = torch.arange(half * C // 2, (half + 1) * C // 2)  # this half's columns of q (its heads)
        qkv = torch.cat([own, own + C, own + 2 * C])  # and of k and v
        hidden = slice(half * 2 * C, (half + 1) * 2 * C)
        w = lambda m: m.weight.detach().t()  # noqa: E731  (in, out)
        self.ln_1 = (block.ln_1.weight.detach(), block.ln_1.bias.detach())
        self.ln_2 = (block.ln_2.weight.detach(), block.ln_2.bias.detach())
        self.qkv = (block.attn.c_attn.bias.detach()[qkv], w(block.attn.c_attn)[:, qkv].contiguous())
        self.proj = w(block.attn.c_proj)[own].contiguous()  # (C/2, C)
        self.fc = (block.mlp.c_fc.bias.detach()[hidden], w(block.mlp.c_fc)[:, hidden].contiguous())
        self.fc_proj = w(block.mlp.c_proj)[hidden].contiguous()  # (2C, C)
        self.keys = torch.empty(1, nh // 2, block_size, hs)
        self.values = torch.empty(1, nh // 2, block_size, hs)
        self.C, self.nh, self.hs = C, nh, hs

    def attention(self, x: torch.Tensor, length: int) -> torch.Tensor:
        """This half's heads' share of the attention output after c_proj (1, C), without its bias."""
        h = F.layer_norm(x, (self.C,), *self.ln_1, eps=1e-5)
        bias, weight = self.qkv
        q, k, v = (
            torch.addmm(bias, h, weight).view(1, 3, self.nh // 2, 1, self.hs).unbind(1)
        )  # 3 × (1, nh/2, 1, hs)
        self.keys.narrow(2, length, 1).copy_(k)
        self.values.narrow(2, length, 1).copy_(v)
        keys, values = self.keys.narrow(2, 0, length + 1), self.values.narrow(2, 0, length + 1)
        y = F.scaled_dot_product_attention(q, keys, values)  # (1, nh/2, 1, hs)
        return torch.mm(y.view(1, self.C // 2), self.proj)

    def mlp(self, x: torch.Tensor, gelu) -> torch.Tensor:
        """This half's hidden units' share of the MLP output (1, C), without c_proj's bias."""
        h = F.layer_norm(x, (self.C,), *self.ln_2, eps=1e-5)
        bias, weight = self.fc
        return torch.mm(gelu(torch.addmm(bias, h, weight)), self.fc_proj)


class SplitDecoder:
    """The step on two threads: this one takes half 0, a worker half 1, two hand-offs a layer."""

    def __init__(self, model: GPT):
        c = model.config
        self.wte, self.wpe, self.head = model.wte.weight, model.wpe.weight, model.lm_head.weight
        self.ln_f = (model.ln_f.weight, model.ln_f.bias)
        self.gelu = one_position_gelu(self.wte.device)
        self.halves = [
            [Half(b, i, c.n_embd, c.n_head, c.head_size, c.block_size) for b in model.h] for i in (0, 1)
        ]
        self.biases = [(b.attn.c_proj.bias, b.mlp.c_proj.bias) for b in model.h]
        self.tasks, self.results, self.length = queue.SimpleQueue(), queue.SimpleQueue(), 0
        threading.Thread(target=self.work, daemon=True).start()

    def work(self) -> None:
        torch.set_num_threads(1)
        with torch.inference_mode():
            while True:
                fn, args = self.tasks.get()
                self.results.put(fn(*args))

    def both(self, layer: int, name: str, *args) -> torch.Tensor:
        self.tasks.put((getattr(self.halves[1][layer], name), args))
        return getattr(self.halves[0][layer], name)(*args) + self.results.get()

    @torch.inference_mode()
    def step(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.wte[ids] + self.wpe[self.length]  # (1, C)
        for layer, (proj_bias, fc_proj_bias) in enumerate(self.biases):
            x = x + self.both(layer, "attention", x, self.length) + proj_bias
            x = x + self.both(layer, "mlp", x, self.gelu) + fc_proj_bias
        self.length += 1
        return F.linear(F.layer_norm(x, x.shape[-1:], *self.ln_f, eps=1e-5), self.head)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=15, help="timed steps a burst, after 20 untimed")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=65, block_size=256, n_layer=6, n_head=6, n_embd=384, dropout=0.0)).eval()
    decoder, split, ids = Decoder(model), SplitDecoder(model), torch.tensor([3])
    whole = Decoder(model, split_from=2**62)  # never cut
    cache = KVCache(model.config, 1)
    worst = max((decoder.step(ids, cache) - split.step(ids)).abs().max().item() for _ in range(5))
    print(f"largest logit difference from the Decoder over 5 steps: {worst:.1e}")
    buffer = torch.ones(32 * 2**20)
    weights = sum(p.numel() * 4 for name, p in model.named_parameters() if p.dim() == 2 and "wpe" not in name)

    def decoder_burst(decoder: Decoder = decoder) -> float:
        c = KVCache(model.config, 1)
        with torch.inference_mode():
            for _ in range(20):
                decoder.step(ids, c)
            start = time.perf_counter()
            for _ in range(args.steps):
                decoder.step(ids, c)
        return (time.perf_counter() - start) / args.steps

    def split_burst() -> float:
        split.length = 0
        for _ in range(20):
            split.step(ids)
        start = time.perf_counter()
        for _ in range(args.steps):
            split.step(ids)
        return (time.perf_counter() - start) / args.steps

    def read_burst() -> float:  # seconds to read the weights at the bandwidth of summing a buffer
        start = time.perf_counter()
        buffer.sum()
        return (time.perf_counter() - start) * weights / (buffer.numel() * 4)

    matrices = [m for layer in decoder.layers for m in (layer.qkv, layer.proj, layer.fc, layer.fc_proj)]
    rows = [torch.randn(1, m.weight.shape[0]) for m in matrices]  # (1, in) each

    def products_burst() -> float:  # the step's 24 products alone, cut as the Decoder cuts them
        parts = decoder.parts(model.config.n_embd)  # 1 (whole) on 1 thread
        with torch.inference_mode():
            start = time.perf_counter()
            for _ in range(args.steps):
                for x, m in zip(rows, matrices, strict=True):
                    _matmul(x, m, parts)
        return (time.perf_counter() - start) / args.steps

    def matrices_read_burst() -> float:  # the same 24 matrices read (summed), one call each
        start = time.perf_counter()
        for _ in range(args.steps):
            for m in matrices:
                m.weight.sum()
        return (time.perf_counter() - start) / args.steps

    runs = {"Decoder, 1 thread": (1, decoder_burst), "Decoder, 2 threads": (2, decoder_burst)}
    runs |= {"whole products, 2 thr.": (2, lambda: decoder_burst(whole))}
    runs |= {"split, 2 x 1 thread": (1, split_burst)}
    runs |= {"weights read, 1 thread": (1, read_burst), "weights read, 2 threads": (2, read_burst)}
    runs |= {"products, 1 thread": (1, products_burst), "products, 2 threads": (2, products_burst)}
    runs |= {"matrices read, 1 thread": (1, matrices_read_burst)}
    runs |= {"matrices read, 2 thr.": (2, matrices_read_burst)}
    found = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, (threads, burst) in runs.items():
            torch.set_num_threads(threads)
            found[name].append(burst())
    for name, times in found.items():
        print(f"{name:24s} best {min(times) * 1e3:6.2f} ms   median {statistics.median(times) * 1e3:6.2f} ms")


if __name__ == "__main__":
    main()

"""One layer's attention on a prompt as a picture: each head's (T, T) weights as a square, side by side.

For tools that show images (TensorBoard, Weights & Biases). Rows are queries,
columns the keys they attend to; weight 0 is white and weight 1 dark blue, linearly
in between; the masked future (above the diagonal) is light grey, so it is told
from a weight of 0. Each weight is a SCALE × SCALE block of pixels and heads are
GAP pixels apart. Plain torch: an (3, H, W) uint8 tensor, no image library.
"""

import torch

SCALE = 4  # pixels per weight, each way
GAP = 2  # pixels between heads
WHITE = (255, 255, 255)
DARK_BLUE = (8, 48, 107)  # weight 1
MASKED = (225, 225, 225)  # a future position, never attended to
BACKGROUND = (255, 255, 255)


def attention_image(weights: torch.Tensor) -> torch.Tensor:
    """One layer's heads, side by side: weights (nh, T, T) -> image (3, T·SCALE, nh·(T·SCALE + GAP) - GAP)."""
    nh, T, _ = weights.shape
    w = weights.detach().float().cpu().clamp(0.0, 1.0)  # (nh, T, T)
    white, dark = torch.tensor(WHITE, dtype=torch.float32), torch.tensor(DARK_BLUE, dtype=torch.float32)
    rgb = white.view(3, 1, 1, 1) + (dark - white).view(3, 1, 1, 1) * w.unsqueeze(0)  # (3, nh, T, T)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)  # (T, T): above the diagonal
    rgb[:, :, future] = torch.tensor(MASKED, dtype=torch.float32).view(3, 1, 1)
    big = rgb.repeat_interleave(SCALE, dim=2).repeat_interleave(SCALE, dim=3)  # (3, nh, T·S, T·S)
    side = T * SCALE
    background = torch.tensor(BACKGROUND, dtype=torch.float32).view(3, 1, 1)
    image = background.repeat(1, side, nh * (side + GAP) - GAP)  # (3, H, W)
    for head in range(nh):
        left = head * (side + GAP)
        image[:, :, left : left + side] = big[:, head]
    return image.round().to(torch.uint8)  # (3, H, W)

"""Principal component analysis: the 2-D map of the character embeddings on the explainer page."""

import torch


def principal_components(x: torch.Tensor, k: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of x (n, d) projected onto their k directions of largest variance.

    Returns (coordinates (n, k), each direction's share of the total variance (k,)).
    Each direction's sign is fixed so that its largest-magnitude entry is positive,
    so the map does not flip with the SVD routine. Missing directions (fewer
    than k rows or columns) give zero coordinates and zero share.
    """
    centered = x.double() - x.double().mean(dim=0)  # (n, d)
    _, s, vh = torch.linalg.svd(centered, full_matrices=False)  # vh: (min(n, d), d)
    directions = vh[:k]  # (k', d)
    biggest = directions.abs().argmax(dim=1, keepdim=True)  # (k', 1)
    directions = directions * torch.sign(directions.gather(1, biggest))
    coords = centered @ directions.T  # (n, k')
    variance = s**2
    share = variance[:k] / variance.sum() if variance.sum() > 0 else torch.zeros_like(variance[:k])
    missing = k - coords.size(1)
    coords = torch.cat([coords, coords.new_zeros(coords.size(0), missing)], dim=1)
    share = torch.cat([share, share.new_zeros(missing)])
    return coords.float(), share.float()

"""A selector's loss probe, computed by the executor (docs/selection.md, "Probes"): the global
model's mean per-sample loss on each probed client's training rows (all of them, or a uniform
sample drawn from the key ("selection.probe", client, round)), as one forward pass per chunk
of the concatenated rows, reduced per client; eval mode (a model with BatchNorm statistics
uses the global ones). Real compute; the protocol charges its virtual time."""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

CHUNK = 4096


def probe_rows(executor, task: int, clients: np.ndarray, round_: int, max_samples: Optional[int]) -> list:
    """Each client's rows into the task's x / y that its probe reads."""
    rows = []
    client_rows = executor.tasks[task].client_rows
    for c in np.asarray(clients).tolist():
        r = client_rows[c]
        if max_samples is not None and len(r) > max_samples:
            rng = executor.streams.keyed("selection.probe", c, round_)
            pick = np.sort(rng.choice(len(r), max_samples, replace=False))
            r = r[torch.as_tensor(pick, device=r.device)]
        rows.append(r)
    return rows


def probe_losses(executor, task: int, w, buffers, clients, round_: int, max_samples=None) -> np.ndarray:
    """A selector's loss probe on `executor`: the mean loss of the global model w on each
    client's training rows (at most `max_samples` of them, drawn uniformly)."""
    rows = probe_rows(executor, task, clients, round_, max_samples)
    executor.stats.loss_probe_rows += int(sum(len(r) for r in rows))
    return client_losses(executor.tasks[task], w.detach().to(executor.device), buffers, rows)


@torch.no_grad()
def client_losses(td, w: torch.Tensor, buffers: Optional[torch.Tensor], rows: list) -> np.ndarray:
    """Mean per-sample loss of parameters w on each client's rows (`rows[i]`)."""
    if not rows:
        return np.zeros(0)
    lengths = torch.tensor([len(r) for r in rows], device=w.device)
    idx = torch.cat(rows)
    owner = torch.repeat_interleave(torch.arange(len(rows), device=w.device), lengths)
    sums = torch.zeros(len(rows), dtype=torch.float64, device=w.device)
    net = td.net
    for s in range(0, len(idx), CHUNK):
        part = idx[s:s + CHUNK]
        out = net.forward(w, td.x[part], buffers)
        sums.index_add_(0, owner[s:s + CHUNK], net.sample_losses(out, td.y[part]).to(torch.float64))
    return (sums / lengths.to(torch.float64)).cpu().numpy()

"""Per-client algorithm state in one store (DESIGN.md section 3, "Parameters").

Control variates (SCAFFOLD), stored gradients (FedSUM, MIFA, FedVARP), kept updates
(FedUMF), stale local models (FedAWE): each kind of state is one stacked `[N, d]` tensor,
created on first use, on the run's device and in its dtype; integer or scalar state
(FedSUM-CR's r_i, FedAU's counters) is one `[N]` NumPy array. Never a dict of per-client
tensor copies.

A row may be *pending*: a lazy value (`compute.lazy`) that nobody has read yet, such as a
FedUMF client's background update. `put` keeps the lazy beside the table; `get` returns it
(so a later job can depend on it without computing it now); reading it through `row` or
`table` materialises it into the table. Overwriting a pending row drops it, and the job
behind it is never computed unless something else reads it (DESIGN.md: laziness).
"""
from __future__ import annotations

from typing import Optional, Union

import numpy as np
import torch

from ..compute.lazy import Lazy, force, resolve


class ClientStates:
    def __init__(self, num_clients: int, dim: int, device: torch.device, dtype: torch.dtype):
        self.n, self.dim, self.device, self.dtype = num_clients, dim, device, dtype
        self._tables: dict[str, torch.Tensor] = {}
        self._pending: dict[str, dict[int, Lazy]] = {}
        self._scalars: dict[str, np.ndarray] = {}
        self.peak_bytes = 0

    # -- vector state -------------------------------------------------------------------
    def table(self, kind: str, init: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The `[N, d]` table of `kind` (every pending row materialised), created on first use:
        zeros, or `init` (a `[d]` vector) in every row."""
        t = self._tables.get(kind)
        if t is None:
            if init is None:
                t = torch.zeros(self.n, self.dim, device=self.device, dtype=self.dtype)
            else:
                t = init.detach().to(device=self.device, dtype=self.dtype).expand(self.n, self.dim).clone()
            self._tables[kind] = t
            self._pending.setdefault(kind, {})
            self._note_size()
        self._materialise(kind)
        return t

    def has(self, kind: str) -> bool:
        return kind in self._tables

    def get(self, kind: str, client: int, init: Optional[torch.Tensor] = None) -> Union[torch.Tensor, Lazy]:
        """Client's row: a pending lazy as it is (not computed), else a view of the table row."""
        pend = self._pending.get(kind, {}).get(client)
        if pend is not None and not pend.done:
            return pend
        return self.row(kind, client, init)

    def row(self, kind: str, client: int, init: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Client's row as a tensor (a pending value is computed and stored first)."""
        if kind not in self._tables:
            self.table(kind, init)
        pend = self._pending[kind].pop(client, None)
        t = self._tables[kind]
        if pend is not None:
            t[client] = force(pend).detach().to(device=self.device, dtype=self.dtype)
        return t[client]

    def put(self, kind: str, client: int, value, init: Optional[torch.Tensor] = None) -> None:
        """Set client's row to `value` (a tensor, or a lazy kept pending until read)."""
        if kind not in self._tables:
            self.table(kind, init)
        if isinstance(value, Lazy) and not value.done:
            self._pending[kind][client] = value
            return
        self._pending[kind].pop(client, None)
        self._tables[kind][client] = force(value).detach().to(device=self.device, dtype=self.dtype)

    def put_rows(self, kind: str, clients, values: torch.Tensor, init: Optional[torch.Tensor] = None) -> None:
        """Set several rows at once (values `[len(clients), d]`)."""
        if kind not in self._tables:
            self.table(kind, init)
        idx = torch.as_tensor(np.asarray(clients, dtype=np.int64), device=self.device)
        for c in np.asarray(clients, dtype=np.int64).tolist():
            self._pending[kind].pop(c, None)
        self._tables[kind][idx] = values.detach().to(device=self.device, dtype=self.dtype)

    def drop(self, kind: str, client: int, reset: Optional[torch.Tensor] = None) -> None:
        """Forget a pending value (its job is not computed for this store) and reset the row
        to zeros, or to `reset`."""
        if kind not in self._tables:
            return
        self._pending[kind].pop(client, None)
        if reset is None:
            self._tables[kind][client].zero_()
        else:
            self._tables[kind][client] = reset.detach().to(device=self.device, dtype=self.dtype)

    def is_pending(self, kind: str, client: int) -> bool:
        p = self._pending.get(kind, {}).get(client)
        return p is not None and not p.done

    def _materialise(self, kind: str) -> None:
        pend = self._pending.get(kind)
        if not pend:
            return
        items = list(pend.items())
        resolve([v for _, v in items])
        t = self._tables[kind]
        for c, v in items:
            t[c] = force(v).detach().to(device=self.device, dtype=self.dtype)
        pend.clear()

    # -- scalar state ---------------------------------------------------------------------
    def scalars(self, kind: str, dtype=np.float64, init=0) -> np.ndarray:
        """The `[N]` NumPy array of `kind`, created on first use filled with `init`."""
        a = self._scalars.get(kind)
        if a is None:
            a = self._scalars[kind] = np.full(self.n, init, dtype=dtype)
            self._note_size()
        return a

    # -- accounting -----------------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        """Bytes held by the store now (tables and scalar arrays)."""
        return int(sum(t.numel() * t.element_size() for t in self._tables.values())
                   + sum(a.nbytes for a in self._scalars.values()))

    def _note_size(self) -> None:
        self.peak_bytes = max(self.peak_bytes, self.nbytes)

    def summary(self) -> dict:
        """For summary.json: bytes per kind and in total."""
        kinds = {k: int(t.numel() * t.element_size()) for k, t in self._tables.items()}
        kinds.update({k: int(a.nbytes) for k, a in self._scalars.items()})
        return {"client_state_bytes": self.nbytes, "client_state_kinds": kinds}

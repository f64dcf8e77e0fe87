"""Per-client algorithm state in one store (docs/client-state.md).

Control variates (SCAFFOLD), stored gradients (FedSUM, MIFA, FedVARP), kept updates
(FedUMF), stale local models (FedAWE): each kind of vector state is one table of N rows of
d values, on the run's device and in its dtype; integer or scalar state (FedSUM-CR's r_i,
FedAU's counters) is one `[N]` NumPy array. Never a dict of per-client tensor copies.

Rows are stored on first write. A row never written holds the kind's initial value (zeros,
or the `init` vector given when the kind is created) and takes no memory: the rows written
live in fixed-size blocks (about 1 MiB each, at most N rows; growth never copies) reached through a
client -> slot map. Memory thus scales with the clients that ever took part, not with N.
A kind declared with `keep_sum=True` also keeps the sum of all N rows exactly
(`exact_sum.ExactSum`): `mean(kind)` is then the same bits whatever the order of the writes
and the layout, and costs O(d), not O(N d).

A row may be *pending*: a lazy value (`compute.lazy`) that nobody has read yet, such as a
FedUMF client's background update. `put` keeps the lazy beside the table; `get` returns it
(so a later job can depend on it without computing it now); reading it through `row`,
`rows`, `table` or `mean` materialises it. Overwriting a pending row drops it, and the job
behind it is never computed unless something else reads it (laziness: docs/engine.md).
"""
from __future__ import annotations

from typing import Optional, Union

import numpy as np
import torch

from ..compute.lazy import Lazy, force, resolve
from .exact_sum import ExactSum

BLOCK_BYTES = 1 << 20          # rows are allocated in blocks of about this size (at least one row)


class _Kind:
    """One kind of vector state: its rows written so far (or all N, dense), pending lazies,
    and optionally the exact sum of all N rows."""

    def __init__(self, n: int, dim: int, device, dtype, init: Optional[torch.Tensor], keep_sum: bool, dense: bool):
        self.n, self.dim, self.device, self.dtype = n, dim, device, dtype
        self.init = None if init is None else init.detach().to(device=device, dtype=dtype).clone()
        self.dense = dense
        self.slot: dict[int, int] = {}          # client -> slot (sparse layout)
        self.pending: dict[int, Lazy] = {}
        self.sum = None
        if keep_sum:
            if self.init is not None and bool((self.init != 0).any()):
                raise ValueError("keep_sum needs a kind whose unwritten rows are zeros")
            self.sum = ExactSum(dim, dtype, device)
        if dense:                               # one block of all N rows, slot = client
            self.per_block = max(n, 1)
            self.blocks = [self._fresh(n)]
        else:
            elem = torch.empty((), dtype=dtype).element_size()
            self.per_block = max(1, min(n, BLOCK_BYTES // max(1, dim * elem)))
            self.blocks = []

    def _fresh(self, rows: int) -> torch.Tensor:
        if self.init is None:
            return torch.zeros(rows, self.dim, device=self.device, dtype=self.dtype)
        return self.init.expand(rows, self.dim).clone()

    # -- layout ---------------------------------------------------------------------------
    def find(self, client: int) -> Optional[int]:
        return client if self.dense else self.slot.get(client)

    def _allocate(self, client: int) -> int:
        s = len(self.slot)
        if s == len(self.blocks) * self.per_block:
            self.blocks.append(torch.empty(self.per_block, self.dim, device=self.device, dtype=self.dtype))
        self.slot[client] = s
        return s

    def view(self, s: int) -> torch.Tensor:
        return self.blocks[s // self.per_block][s % self.per_block]

    @property
    def written(self) -> int:
        return self.n if self.dense else len(self.slot)

    @property
    def nbytes(self) -> int:
        b = sum(t.numel() * t.element_size() for t in self.blocks)
        return int(b + (0 if self.sum is None else self.sum.nbytes))

    # -- values ---------------------------------------------------------------------------
    def current(self, client: int) -> torch.Tensor:
        """Client's row (pending values not looked at): a view of the stored row, or a new
        tensor holding the initial value."""
        s = self.find(client)
        if s is not None:
            return self.view(s)
        if self.init is None:
            return torch.zeros(self.dim, device=self.device, dtype=self.dtype)
        return self.init.clone()

    def write(self, clients: list, values: torch.Tensor) -> None:
        """Set rows (values `[len(clients), d]`, already on the device and in the dtype)."""
        if self.sum is not None:
            if len(set(clients)) != len(clients):
                raise ValueError(f"put_rows: a client appears twice in {clients}")
            stored = [c for c in clients if self.find(c) is not None]          # unwritten rows are zeros
            if stored:
                self.sum.add(torch.stack([self.view(self.find(c)) for c in stored]), -1)   # old rows out
            self.sum.add(values, 1)                                                        # new rows in
        for c, v in zip(clients, values):
            s = self.find(c)
            self.view(self._allocate(c) if s is None else s).copy_(v)

    def materialise(self, clients=None) -> None:
        """Compute pending values (all, or those of `clients`) and store them."""
        items = (list(self.pending.items()) if clients is None
                 else [(c, self.pending[c]) for c in clients if c in self.pending])
        if not items:
            return
        resolve([v for _, v in items])
        for c, _ in items:
            self.pending.pop(c)
        self.write([c for c, _ in items], torch.stack([self._cast(force(v)) for _, v in items]))

    def _cast(self, v) -> torch.Tensor:
        return v.detach().to(device=self.device, dtype=self.dtype)


class ClientStates:
    #: private: lay every vector kind out as a dense [N, d] table (the reference layout the
    #: tests compare the row store with, bit for bit)
    _dense_layout = False

    def __init__(self, num_clients: int, dim: int, device: torch.device, dtype: torch.dtype):
        self.n, self.dim, self.device, self.dtype = num_clients, dim, device, dtype
        self._kinds: dict[str, _Kind] = {}
        self._scalars: dict[str, np.ndarray] = {}
        self.peak_bytes = 0

    # -- vector state -------------------------------------------------------------------
    def declare(self, kind: str, init: Optional[torch.Tensor] = None, keep_sum: bool = False) -> None:
        """Create `kind` (if new): unwritten rows hold zeros, or `init` (a `[d]` vector);
        `keep_sum`: keep the exact sum of all N rows for `mean`."""
        if kind not in self._kinds:
            self._kinds[kind] = _Kind(self.n, self.dim, self.device, self.dtype, init, keep_sum, self._dense_layout)
            self._note_size()

    def _kind(self, kind: str, init: Optional[torch.Tensor] = None) -> _Kind:
        self.declare(kind, init)
        return self._kinds[kind]

    def has(self, kind: str) -> bool:
        return kind in self._kinds

    def kinds(self) -> list:
        return list(self._kinds)

    def get(self, kind: str, client: int, init: Optional[torch.Tensor] = None) -> Union[torch.Tensor, Lazy]:
        """Client's row: a pending lazy as it is (not computed), else as `row`."""
        pend = self._kind(kind, init).pending.get(client)
        if pend is not None and not pend.done:
            return pend
        return self.row(kind, client, init)

    def row(self, kind: str, client: int, init: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Client's row as a tensor (a pending value is computed and stored first): a view
        of the stored row (valid until the next write), or a new tensor holding the initial
        value for a row never written (reading allocates nothing)."""
        k = self._kind(kind, init)
        if client in k.pending:
            k.materialise({client})
            self._note_size()
        return k.current(client)

    def rows(self, kind: str, clients) -> torch.Tensor:
        """The rows of `clients`, stacked (`[len(clients), d]`, a copy)."""
        return torch.stack([self.row(kind, int(c)) for c in clients])

    def put(self, kind: str, client: int, value, init: Optional[torch.Tensor] = None) -> None:
        """Set client's row to `value` (a tensor, or a lazy kept pending until read)."""
        k = self._kind(kind, init)
        if isinstance(value, Lazy) and not value.done:
            k.pending[client] = value
            return
        k.pending.pop(client, None)
        k.write([client], k._cast(force(value)).reshape(1, -1))
        self._note_size()

    def put_rows(self, kind: str, clients, values: torch.Tensor, init: Optional[torch.Tensor] = None) -> None:
        """Set several rows at once (values `[len(clients), d]`)."""
        k = self._kind(kind, init)
        ids = np.asarray(clients, dtype=np.int64).tolist()
        for c in ids:
            k.pending.pop(c, None)
        k.write(ids, k._cast(values))
        self._note_size()

    def drop(self, kind: str, client: int, reset: Optional[torch.Tensor] = None) -> None:
        """Forget a pending value (its job is not computed for this store) and reset the row
        to zeros, or to `reset`."""
        k = self._kinds.get(kind)
        if k is None:
            return
        k.pending.pop(client, None)
        if reset is None and k.init is None and k.find(client) is None:
            return                                  # a row never written already reads zeros
        value = torch.zeros(self.dim) if reset is None else reset
        k.write([client], k._cast(value).reshape(1, -1))
        self._note_size()

    def is_pending(self, kind: str, client: int) -> bool:
        k = self._kinds.get(kind)
        p = None if k is None else k.pending.get(client)
        return p is not None and not p.done

    def mean(self, kind: str) -> torch.Tensor:
        """(1/N) sum of all N rows (unwritten rows count with their initial value, zeros),
        from the exact sum kept by a kind declared with `keep_sum`: O(d)."""
        k = self._kinds[kind]
        if k.sum is None:
            raise ValueError(f"client state {kind!r} was not declared with keep_sum=True")
        k.materialise()
        self._note_size()
        return k.sum.mean(self.n)

    def table(self, kind: str, init: Optional[torch.Tensor] = None) -> torch.Tensor:
        """All N rows as one `[N, d]` tensor (pending rows materialised first). A copy of
        N x d values in the row layout: for inspection of small fleets (tests), never on a
        run's path. The dense layout returns its live table."""
        k = self._kind(kind, init)
        k.materialise()
        self._note_size()
        if k.dense:
            return k.blocks[0]
        out = k._fresh(self.n)
        for c, s in k.slot.items():
            out[c] = k.view(s)
        return out

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
        """Bytes held by the store now: row blocks, exact sums and scalar arrays."""
        return int(sum(k.nbytes for k in self._kinds.values()) + sum(a.nbytes for a in self._scalars.values()))

    @property
    def dense_nbytes(self) -> int:
        """Bytes a dense store would hold: N x d values per vector kind, plus the scalar arrays."""
        elem = torch.empty((), dtype=self.dtype).element_size()
        return int(len(self._kinds) * self.n * self.dim * elem + sum(a.nbytes for a in self._scalars.values()))

    def _note_size(self) -> None:
        self.peak_bytes = max(self.peak_bytes, self.nbytes)

    def summary(self) -> dict:
        """For summary.json: bytes held per kind and in total, the dense equivalent, and the
        rows written per vector kind."""
        kinds = {k: v.nbytes for k, v in self._kinds.items()}
        kinds.update({k: int(a.nbytes) for k, a in self._scalars.items()})
        return {"client_state_bytes": self.nbytes, "client_state_dense_bytes": self.dense_nbytes,
                "client_state_kinds": kinds,
                "client_state_rows": {k: v.written for k, v in self._kinds.items()}}

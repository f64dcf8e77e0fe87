"""The `secure_aggregation:` scenario block (docs/algorithms/secagg.md): which protocol
(SecAgg or SecAgg+), its message sizes, and when the unmasking round runs. Checked across
blocks by `secure_aggregation_problems` (the rounds protocol, dedicated links)."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from ..registry import Params


class SecureAggregationParams(Params):
    """Secure aggregation's extra messages and round trips (values unchanged: the sum is exact)."""
    protocol: Literal["secagg", "secagg_plus"] = Field(
        "secagg", description="secagg: every participant is a neighbour (Bonawitz et al. 2017); "
                              "secagg_plus: k neighbours on a sparse graph (Bell et al. 2020)")
    neighbours: Optional[int] = Field(None, ge=1, description="secagg_plus: k (default min(n - 1, 2 ceil(log2 n)))")
    unmask: Literal["always", "on_dropout"] = Field(
        "always", description="always: round 4 removes the self-masks every round; on_dropout: only when a "
                              "selected client did not arrive (pairwise masks only)")
    key_bytes: int = Field(33, ge=1, description="P: one public key (a compressed 256-bit curve point)")
    share_bytes: int = Field(32, ge=1, description="H: one Shamir share (a 256-bit field element)")
    id_bytes: int = Field(4, ge=1, description="I: one client id")
    aead_bytes: int = Field(28, ge=0, description="A: authenticated encryption's overhead per ciphertext (AES-GCM)")


def secure_aggregation_problems(sc) -> list:
    """(YAML path, message) for a `secure_aggregation:` block where it cannot be modelled."""
    if sc.secure_aggregation is None:
        return []
    out = []
    if sc.protocol.name != "rounds":
        out.append(("secure_aggregation", f"is modelled under protocol.name 'rounds' only; here "
                                          f"{sc.protocol.name!r} (docs/algorithms/secagg.md section 4)"))
    if sc.network.server_link is not None or sc.network.topology is not None:
        out.append(("secure_aggregation", "is timed over dedicated client links; remove network.server_link / "
                                          "network.topology (docs/algorithms/secagg.md section 4)"))
    return out

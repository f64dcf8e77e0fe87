"""The physical system of a federated fleet: compute speed, availability, selection, network.

This package imports nothing of flemu's and no torch (docs/architecture.md section 1): every model here
is plain Python + NumPy (+ SimPy for flows that share links), seeded by the generators the
caller passes in, so it can be used and tested on its own.
"""

"""Workloads: datasets, how they are partitioned among clients, and the model zoo
(docs/algorithms/workloads.md)."""

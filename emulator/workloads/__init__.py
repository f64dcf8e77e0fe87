"""Workloads: datasets, how they are partitioned among clients, and the model zoo
(shared/specs/workloads.md)."""

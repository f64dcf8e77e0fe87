"""Protocols own time: one class per protocol, sharing the helpers of `base`."""

"""Transfers in virtual time over the clients' links (a star of independent links)."""
from __future__ import annotations

from devices.network import message_bytes


class NetworkSim:
    def __init__(self, env, settings):
        self.env = env
        self.bytes_per_param = settings.bytes_per_param
        self.overhead = settings.overhead_bytes

    def message_bytes(self, numel: int) -> int:
        return message_bytes(numel, self.bytes_per_param, self.overhead)

    def transfer_time(self, client, nbytes: int, direction: str) -> float:
        return client.link.transfer_time(nbytes, direction)

    def transfer(self, client, nbytes: int, direction: str):
        """A SimPy event that fires when the message has arrived."""
        return self.env.timeout(self.transfer_time(client, nbytes, direction))

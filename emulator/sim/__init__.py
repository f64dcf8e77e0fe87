"""The SimPy world: clock, RNG streams, clients, network, recorder and protocols."""

"""A compute model from a plain function: each local step of client c takes
0.1 x (1 + c % 3) seconds in every round (three device speeds). `rng` is the client's
stream for that round, for models that draw. Use with
`compute: {model: by_client}` in a device group and `plugins: [step_time.py]`."""
from emulator.api import register_step_time


def by_client(client: int, round_: int, rng) -> float:
    return 0.1 * (1 + client % 3)


register_step_time("by_client", by_client, description="step time 0.1 x (1 + client % 3) s")

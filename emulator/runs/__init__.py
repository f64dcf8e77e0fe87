"""One run's write side: from a validated scenario to a run directory that can be trusted.

    runner.py     builds the world, runs it, summarises it and writes the run directory
    outputs.py    what flemu may write and replace (run directories, reports, plots)
    invariants.py the post-run check of what must hold
    callbacks.py  what runs after each aggregation and at the end (the scenario's and the user's)
    tracking/     the built-in trackers (MLflow, TensorBoard)
"""

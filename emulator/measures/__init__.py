"""What a run's records say, computed once and shared by the runner (summary.json, metrics
columns) and by `analysis`:

    participation.py  the FedSUM delay metrics of the participation that happened
    gain.py           hitting times and the multi-model gain
    fairness.py       the spread of per-client accuracy (client_acc_* columns)
    group_shares.py   who took part, per device group (from clients.csv and partition.csv)
"""

"""Events in, a ``Report`` out: the only way a report is made.

``report`` builds it (Dynamo graphs and breaks, XLA graphs and HLO lowering breaks,
recompiles), with the time split (``timesplit``), the timeline (``timeline``), the TPU view's
rows (``tpu``), the pod's rows (``pod``), and the findings ranked by cost (``findings``), each
named and fixed from the one table of causes (``causes``).
"""

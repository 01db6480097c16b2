"""What observes a run: the session that starts and ends an observation, the recorder the probes
emit events into, the whole-process observation of ``xlabridge report`` (started by
``bootstrap/sitecustomize.py``), the in-process capture of a sharded run (``pod``), the
environment a report records, the TPU view's compile pass after a run, and the probes.

Everything here produces events (``xlabridge.diagnostics.events``); nothing here builds a report.
"""

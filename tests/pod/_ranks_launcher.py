"""Launches ``WORLD`` ranks of ``tests.pod._rank_worker`` as separate processes, as torchrun would:
each with its own ``RANK`` and one PJRT CPU device, gradients averaged through gloo.

``python -m tests.pod._ranks_launcher WORLD STEPS DIVERGE_AT``: rank 1 diverges at step
``DIVERGE_AT`` (``-1``: never). Exits with the first non-zero status of a rank.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys


def main() -> None:
    world, steps, diverge_at = sys.argv[1:4]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ranks = []
    for rank in range(int(world)):
        env = dict(os.environ, PJRT_DEVICE="CPU", RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=world,
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        env.pop("CPU_NUM_DEVICES", None)
        ranks.append(subprocess.Popen([sys.executable, "-m", "tests.pod._rank_worker", steps, diverge_at], env=env))
    sys.exit(next((code for code in (rank.wait() for rank in ranks) if code), 0))


if __name__ == "__main__":
    main()

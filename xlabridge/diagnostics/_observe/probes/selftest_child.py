"""The probe self-test's program, run in a child process by ``selftest.Run``: observes a tiny
compile that must fire every probe and prints, as one JSON line, what each probe failed to see.

It observes through the session (``_session.start``/``stop``), as a user's run does; it is a
module of its own so that the session, which starts the self-test, never imports it.
"""

from __future__ import annotations

import json
import sys

from xlabridge import _optional
from xlabridge.diagnostics._observe import recorder as _recorder, session as _session
from xlabridge.diagnostics._observe.probes.selftest import expectations


def _program() -> dict[str, str]:
    """Run in the child: compile and call the probe-firing functions, return ``expectations``."""
    import torch

    with_xla = _optional.is_available("torch_xla")
    with_torchtpu = _optional.is_available("torch_tpu")
    imported_xla = with_xla and "torch_xla" not in sys.modules
    recorder = _recorder.Recorder()
    _session.start(recorder, selftest_run=False)
    try:
        def step(x: torch.Tensor) -> torch.Tensor:
            y = torch.exp2((x * 3).sin())
            print(end="")  # a Dynamo graph break
            return y.cos()

        if with_xla:
            import torch_xla

            device, backend = torch_xla.device(), "openxla"
        else:
            device, backend = torch.device("cpu"), "aot_eager"
        compiled = torch.compile(step, backend=backend, dynamic=False)
        for size in (8, 8, 8, 8, 8, 16):
            x = torch.randn(size, device=device, requires_grad=True)
            compiled(x).sum().backward()
            if with_xla:
                torch_xla.sync()
        if with_xla:  # a graph of a backend that is not an XLA front end: its calls are timed
            other = torch.compile(lambda x: (x * 2).sin(), backend="aot_eager", dynamic=False)
            other(torch.randn(4, requires_grad=True)).sum().backward()
        if with_xla:
            torch.compile(lambda x: x * 2, backend="xlabridge")(torch.randn(4, device=device))
            torch_xla.sync()
            torch_xla.compile(lambda x: x.sin())(torch.randn(4, device=device))  # a compile region
            torch_xla.experimental.eager_mode(True)  # one op, its own XLA computation
            try:
                (torch.ones(3, device=device) * 5).cpu()
            finally:
                torch_xla.experimental.eager_mode(False)
            import torch_xla.core.xla_model as xm

            xm.wait_device_ops()
        if with_torchtpu:  # without a TPU the probe runs the partitions on the CPU
            on_tpu = torch.compile(lambda x: (x * 3).sin().cos(), backend="tpu", dynamic=False)
            for _ in range(5):
                on_tpu(torch.randn(8, requires_grad=True)).sum().backward()
    finally:
        _session.stop(recorder)
    return expectations(recorder.events, with_xla=with_xla, imported_xla=imported_xla, with_torchtpu=with_torchtpu)


def main() -> None:
    print(json.dumps(_program()))


if __name__ == "__main__":
    main()

"""Which rank of a job holds the others up, read from stacks torch really makes.

A rank whose main thread is inside autograd's engine (``backward()``) waits there for DDP's and
FSDP's gradient collectives, but torch compiles there too: AOTAutograd runs the engine on fake
tensors to trace the backward graph while Dynamo compiles the forward, and compiles that graph
from inside the engine at the first ``backward()``. A rank still compiling holds the others up; it
is not held up by them.

Each stack is taken as the stall watchdog takes it (``watchdog.snapshot()`` from another thread)
from inside a hook that torch calls at a known point, which is the reference for what the rank was
doing: a custom op's backward formula, which autograd's engine runs in an eager ``backward()`` (where
a DDP rank waits for the others) and which AOTAutograd runs while it traces the first compiled call
(before that call returns, before any ``backward()``: the compiled backward runs the traced graph,
not the formula), and a backend's backward compiler, which torch calls only to compile the backward
graph. A job's two ranks are built around those stacks: each stalled for the same two seconds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import torch
from torch._dynamo.backends.common import aot_autograd

from xlabridge._upstream import torch as upstream_torch
from xlabridge.diagnostics import _frames, diagnose
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._build.report import build_report
from xlabridge.diagnostics._observe import watchdog

ENGINE = ("torch/autograd/graph.py", "_engine_run_backward")
"""autograd's engine, as ``backward()`` and ``torch.autograd.grad`` enter it."""
COMPILING = ("joint trace", "backward compile", "backward compile, own compiler")
"""Stacks taken while torch compiled: AOTAutograd tracing the forward and backward inside Dynamo's
compile, the backward graph's compile at the first ``backward()`` by a backend made with torch's
``aot_autograd`` helper (as inductor's is), and by one that calls ``aot_module_simplified`` itself."""


class _Taken:
    """Stacks of this thread taken by the stall watchdog's sampler, by what the test was doing then."""

    def __init__(self) -> None:
        self.doing = ""
        self.stacks: dict[str, tuple[tuple[ev.Frame, ...], list[ev.Activity]]] = {}

    def take(self) -> None:
        me = threading.current_thread().name
        box: dict[str, tuple] = {}
        sampler = threading.Thread(target=lambda: box.update(snapshot=watchdog.snapshot()))
        sampler.start()
        sampler.join()
        threads, activities = box["snapshot"]
        stack = next(t for t in threads if t.name == me)
        self.stacks.setdefault(self.doing, (stack.frames, [a for a in activities if a.thread in ("", me)]))

    def run(self, doing: str, fn: Callable[[], object]) -> None:
        self.doing = doing
        try:
            fn()
        finally:
            self.doing = ""


TAKEN = _Taken()


@torch.library.custom_op("xlabridge_tests::holdup_scale", mutates_args=())
def _scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_scale.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _scale_backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
    if TAKEN.doing:
        TAKEN.take()
    return grad * 2


_scale.register_autograd(_scale_backward)


def _step(x: torch.Tensor) -> torch.Tensor:
    return _scale(x).sin()


def _backward_compiler(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    if TAKEN.doing:
        TAKEN.take()
    return upstream_torch.boxed_nop(gm)


def _forward_compiler(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    return upstream_torch.boxed_nop(gm)


def _own_compilers(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    return upstream_torch.aot_module_simplified(gm, example_inputs, fw_compiler=_forward_compiler,
                                                bw_compiler=_backward_compiler)


def _python_elsewhere() -> None:
    """A rank busy in its own Python (a data loader, a host read): no collective, no backward()."""
    TAKEN.take()


@pytest.fixture(scope="module")
def stacks() -> dict[str, tuple[tuple[ev.Frame, ...], list[ev.Activity]]]:
    x = torch.randn(8, requires_grad=True)
    TAKEN.run("eager backward", lambda: _step(x).sum().backward())
    compiled = torch.compile(_step, backend="aot_eager")
    out = {}
    TAKEN.run("joint trace", lambda: out.update(y=compiled(x)))
    TAKEN.run("compiled backward", lambda: out["y"].sum().backward())
    helper = torch.compile(lambda t: t.cos().sin(), backend=aot_autograd(fw_compiler=_forward_compiler,
                                                                         bw_compiler=_backward_compiler))
    y = helper(x)
    TAKEN.run("backward compile", lambda: y.sum().backward())
    own = torch.compile(lambda t: t.sin().exp(), backend=_own_compilers)
    # observed: Dynamo's compile callbacks, which bracket the backward's compile, reach the sampler
    with diagnose():
        y = own(x)
        TAKEN.run("backward compile, own compiler", lambda: y.sum().backward())
    TAKEN.run("elsewhere", _python_elsewhere)
    return dict(TAKEN.stacks)


def _in_engine(frames: tuple[ev.Frame, ...]) -> bool:
    return any(f.filename.replace("\\", "/").endswith(ENGINE[0]) and f.function == ENGINE[1] for f in frames)


def test_each_stack_was_taken_where_torch_ran_the_hook(stacks) -> None:
    # the compiled backward runs the graph AOTAutograd traced: the formula itself ran only while tracing
    assert "compiled backward" not in stacks
    assert set(stacks) == {"eager backward", "elsewhere", *COMPILING}
    for doing in ("eager backward", *COMPILING):
        assert _in_engine(stacks[doing][0]), doing
    assert not _in_engine(stacks["elsewhere"][0])


def _job(rank0: tuple[tuple[ev.Frame, ...], list[ev.Activity]],
         rank1: tuple[tuple[ev.Frame, ...], list[ev.Activity]]) -> list[ev.Event]:
    """Two ranks of one job, each stalled from 1 s to 3 s after their common start, at these stacks."""
    events: list[ev.Event] = []
    for rank, (frames, activities) in enumerate((rank0, rank1)):
        stamp = {"pid": 1000 + rank, "rank": rank, "world": 2}
        events += [
            ev.ProcessStart(t=0.0, **stamp, wall_time=1.7e9, environment={"argv": [__file__]},
                            framework_paths=_frames.framework_paths(), main_file=__file__),
            ev.Stall(t=1.5, **stamp, since=1.0, after=0.5,
                     threads=[ev.ThreadStack("MainThread", True, frames)], activities=activities),
            ev.StallEnd(t=3.0, **stamp, since=1.0),
            ev.ProcessEnd(t=4.0, **stamp, start=0.0),
        ]
    return events


def _holdups(events: list[ev.Event]) -> list:
    return [f for f in build_report(events).findings if f.category == "rank-holdup"]


def test_a_rank_waiting_in_backward_is_held_up_by_one_elsewhere(stacks) -> None:
    (holdup,) = _holdups(_job(stacks["eager backward"], stacks["elsewhere"]))
    assert holdup.pid == 1001 and holdup.message.startswith("rank 1 holds up rank 0")
    assert "running Python, outside any collective" in holdup.message and "backward()" in holdup.message


@pytest.mark.parametrize("compiling", COMPILING)
def test_a_rank_compiling_is_not_taken_for_one_waiting_in_backward(stacks, compiling) -> None:
    assert not _holdups(_job(stacks[compiling], stacks["elsewhere"]))


@pytest.mark.parametrize("compiling", COMPILING)
def test_a_rank_compiling_holds_up_one_waiting_in_backward(stacks, compiling) -> None:
    (holdup,) = _holdups(_job(stacks[compiling], stacks["eager backward"]))
    assert holdup.pid == 1000 and holdup.message.startswith("rank 0 holds up rank 1")
    assert "compiling" in holdup.message and "running Python" not in holdup.message
    assert "backward()" in holdup.message

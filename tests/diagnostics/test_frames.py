"""Which frame is the user's: one rule, with no special case for any directory of xlabridge."""

from __future__ import annotations

import contextlib
import os

import torch

import xlabridge
from xlabridge.diagnostics import _frames
from xlabridge.diagnostics.events import Frame

TORCH_DIR = os.path.dirname(torch.__file__)
XLABRIDGE_DIR = os.path.dirname(xlabridge.__file__)


def _rule(program: str | None = None) -> _frames.UserCodeRule:
    return _frames.UserCodeRule.of(_frames.framework_paths(), program)


def test_frameworks_and_the_standard_library_are_not_the_user_s_code() -> None:
    rule = _rule()
    assert not rule.is_user(os.path.join(TORCH_DIR, "nn", "modules", "linear.py"))
    assert not rule.is_user(os.path.join(XLABRIDGE_DIR, "backend.py"))
    assert not rule.is_user(contextlib.__file__)
    assert not rule.is_user("<eval_with_key>.3")
    assert rule.is_user(__file__)
    assert rule.is_user("/home/someone/train.py")


def test_installed_model_libraries_are_the_user_s_even_under_the_standard_library() -> None:
    stdlib = _frames.framework_paths()["python-stdlib"][0]
    assert _rule().is_user(os.path.join(stdlib, "site-packages", "transformers", "modeling_gpt2.py"))


def test_the_program_s_directory_is_the_user_s_wherever_it_lies() -> None:
    demo = os.path.join(XLABRIDGE_DIR, "examples", "demo.py")
    assert not _rule().is_user(demo)
    assert _rule(program=demo).is_user(demo)
    assert _rule(program=demo).is_user(os.path.join(XLABRIDGE_DIR, "examples", "compare_step.py"))
    assert not _rule(program=demo).is_user(os.path.join(XLABRIDGE_DIR, "backend.py"))


def test_innermost_user_frame_and_stack_trace_parsing() -> None:
    trace = (
        f'  File "/home/u/train.py", line 10, in main\n    model(x)\n'
        f'  File "{TORCH_DIR}/nn/modules/module.py", line 1775, in _wrapped_call_impl\n    return f()\n'
        f'  File "/home/u/model.py", line 42, in forward\n    y = torch.exp2(x)\n'
        f'  File "{TORCH_DIR}/_tensor.py", line 5, in exp2\n'
    )
    frames = _frames.from_stack_trace(trace)
    assert [f.lineno for f in frames] == [10, 1775, 42, 5]
    assert _rule().innermost(frames) == Frame("/home/u/model.py", 42, "forward")
    assert _rule().innermost(frames[1:2]) == _frames.UNKNOWN

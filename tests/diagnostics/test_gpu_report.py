"""``xlabridge report`` on a GPU training loop (inductor on CUDA), against the loop's own clock:
"other" at most 10%, the compile and execution shares within the loop's steps
(``tools/bench/check_gpu_report.py`` makes the checks; run where CUDA is)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_gpu_training_loop_report_against_its_clock():
    spec = importlib.util.spec_from_file_location("check_gpu_report", ROOT / "tools" / "bench" / "check_gpu_report.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    assert check.main(["--steps", "30"]) == 0

"""The autocast audit: every op in the CUDA, CPU and XLA autocast lists, its policy on each.

Where TorchTPU (torch_tpu) is loaded, its policy is a fourth column, ``torchtpu``: TorchTPU
registers AutocastPrivateUse1 kernels (its ``csrc/eager/amp_policies.cc``) for the ``tpu``
device, which torch alone leaves empty; its ops join the rows, and its gaps against CUDA are
flagged (``torchtpu-missing-vs-cuda``, ``torchtpu-differs-from-cuda``).

The op lists come from ``torch._C._dispatch_get_registrations_for_dispatch_key`` and each
policy from running the op's kernel (``_probe``), at the moment ``audit()`` is called: no
table of policies is written down here, so the audit shows what this torch and torch_xla
(and whatever xlabridge registered) actually do.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import torch

from xlabridge import _optional
from xlabridge.autocast import _probe, _registration
from xlabridge.autocast._ops import NOT_APPLICABLE, TPU_EXCEPTIONS, Policy

COLUMNS = {"cuda": "AutocastCUDA", "cpu": "AutocastCPU", "xla": "AutocastXLA"}
TORCHTPU_COLUMN = ("torchtpu", _probe.PRIVATEUSE1_KEY)
_SHORT = {
    Policy.LOWER_PRECISION: "lower",
    Policy.FP32: "fp32",
    Policy.PROMOTE: "promote",
    Policy.BANNED: "banned",
    Policy.NONE: "-",
    Policy.UNKNOWN: "?",
}

# Gap flags, worst first.
MISSING_VS_CUDA = "missing-vs-cuda"  # CUDA casts the op, XLA does not
DIFFERS_FROM_CUDA = "differs-from-cuda"  # both cast it, differently
MISSING_VS_CPU = "missing-vs-cpu"  # CPU casts the op, XLA does not
TORCHTPU_MISSING_VS_CUDA = "torchtpu-missing-vs-cuda"  # CUDA casts the op, TorchTPU does not
TORCHTPU_DIFFERS_FROM_CUDA = "torchtpu-differs-from-cuda"  # both cast it, differently


@dataclasses.dataclass(frozen=True)
class AuditRow:
    """One op: its policy per backend, gap flags, and a note (exception reason, unknown cause)."""

    op: str
    policies: dict[str, Policy]
    flags: tuple[str, ...]
    note: str = ""
    xla_by_xlabridge: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plain data, for JSON."""
        return {
            "op": self.op,
            **{column: policy.value for column, policy in self.policies.items()},
            "flags": list(self.flags),
            "note": self.note,
            "xla_registered_by_xlabridge": self.xla_by_xlabridge,
        }


@dataclasses.dataclass(frozen=True)
class AuditReport:
    """The audit's result: rows sorted by op, versions, and counts (``summary()``)."""

    rows: tuple[AuditRow, ...]
    torch_version: str
    torch_xla_version: str | None
    torch_tpu_version: str | None = None
    """Set where TorchTPU was loaded: the rows then have a ``torchtpu`` policy."""

    @property
    def columns(self) -> tuple[str, ...]:
        return (*COLUMNS, TORCHTPU_COLUMN[0]) if self.torch_tpu_version else tuple(COLUMNS)

    def summary(self) -> dict[str, int]:
        """How many ops each backend casts, and how many rows carry each gap flag."""
        counts = {
            f"{column}_ops": sum(row.policies[column] is not Policy.NONE for row in self.rows)
            for column in self.columns
        }
        flags = [MISSING_VS_CUDA, DIFFERS_FROM_CUDA, MISSING_VS_CPU]
        if self.torch_tpu_version:
            flags += [TORCHTPU_MISSING_VS_CUDA, TORCHTPU_DIFFERS_FROM_CUDA]
        for flag in flags:
            counts[flag] = sum(flag in row.flags for row in self.rows)
        counts["xla_registered_by_xlabridge"] = sum(row.xla_by_xlabridge for row in self.rows)
        return counts

    def row(self, op: str) -> AuditRow:
        """The row of ``op`` ("aten::mv"); KeyError if no autocast list has it."""
        for row in self.rows:
            if row.op == op:
                return row
        raise KeyError(f"{op!r} is in none of the CUDA, CPU and XLA autocast lists")

    def gaps(self) -> tuple[AuditRow, ...]:
        """Rows with at least one gap flag."""
        return tuple(row for row in self.rows if row.flags)

    def to_dict(self) -> dict[str, Any]:
        """Plain data, for JSON."""
        return {
            "torch": self.torch_version,
            "torch_xla": self.torch_xla_version,
            **({"torch_tpu": self.torch_tpu_version} if self.torch_tpu_version else {}),
            "summary": self.summary(),
            "ops": [row.to_dict() for row in self.rows],
        }

    def to_json(self) -> str:
        """``to_dict()`` as indented JSON."""
        return json.dumps(self.to_dict(), indent=2)

    def __str__(self) -> str:
        summary = self.summary()
        width = max([len(row.op) for row in self.rows] + [2])
        tpu = bool(self.torch_tpu_version)
        lines = [
            f"autocast audit: torch {self.torch_version}, torch_xla {self.torch_xla_version or 'not installed'}"
            + (f", torch_tpu {self.torch_tpu_version}" if tpu else ""),
            "ops cast: " + ", ".join(f"{column.upper()} {summary[f'{column}_ops']}" for column in self.columns),
            f"gaps: {summary[MISSING_VS_CUDA]} {MISSING_VS_CUDA}, {summary[DIFFERS_FROM_CUDA]} "
            f"{DIFFERS_FROM_CUDA}, {summary[MISSING_VS_CPU]} {MISSING_VS_CPU}; "
            f"{summary['xla_registered_by_xlabridge']} XLA kernels registered by xlabridge (marked *)",
            "policies: lower = lower_precision_fp, fp32, promote, banned (raises), - = none, ? = unknown",
            "",
            f"{'op':<{width}}  {'cuda':<8} {'cpu':<8} {'xla':<8} {'torchtpu ' if tpu else ''}flags",
        ]
        if tpu:
            lines.insert(3, f"TorchTPU gaps: {summary[TORCHTPU_MISSING_VS_CUDA]} {TORCHTPU_MISSING_VS_CUDA}, "
                            f"{summary[TORCHTPU_DIFFERS_FROM_CUDA]} {TORCHTPU_DIFFERS_FROM_CUDA}")
        for row in self.rows:
            xla = _SHORT[row.policies["xla"]] + ("*" if row.xla_by_xlabridge else "")
            flags = ",".join(row.flags)
            note = f"  ({row.note})" if row.note else ""
            torchtpu = f"{_SHORT[row.policies['torchtpu']]:<8} " if tpu else ""
            lines.append(
                f"{row.op:<{width}}  {_SHORT[row.policies['cuda']]:<8} {_SHORT[row.policies['cpu']]:<8} "
                f"{xla:<8} {torchtpu}{flags}{note}".rstrip()
            )
        return "\n".join(lines)


def _flags(policies: dict[str, Policy]) -> tuple[str, ...]:
    casts = {column: policy not in (Policy.NONE, Policy.UNKNOWN) for column, policy in policies.items()}
    flags = []
    if casts["cuda"] and not casts["xla"]:
        flags.append(MISSING_VS_CUDA)
    elif casts["cuda"] and policies["cuda"] is not policies["xla"]:
        flags.append(DIFFERS_FROM_CUDA)
    if casts["cpu"] and not casts["xla"]:
        flags.append(MISSING_VS_CPU)
    if "torchtpu" in policies:
        if casts["cuda"] and not casts["torchtpu"]:
            flags.append(TORCHTPU_MISSING_VS_CUDA)
        elif casts["cuda"] and policies["cuda"] is not policies["torchtpu"]:
            flags.append(TORCHTPU_DIFFERS_FROM_CUDA)
    return tuple(flags)


def _note(op: str, findings: dict[str, _probe.Finding]) -> str:
    if op in TPU_EXCEPTIONS:
        return "TPU exception: " + TPU_EXCEPTIONS[op]
    if op in NOT_APPLICABLE:
        return "not applicable to XLA: " + NOT_APPLICABLE[op]
    unknown = [f"{column}: {finding.detail}" for column, finding in findings.items() if finding.policy is Policy.UNKNOWN]
    return "; ".join(unknown)


def audit(load_torch_xla: bool = True) -> AuditReport:
    """Audit the live dispatcher: each op of the CUDA, CPU and XLA autocast lists, its policies.

    ``load_torch_xla``: import torch_xla first when it is installed, so that its AutocastXLA
    kernels are registered and the XLA column is real; without torch_xla the column is empty.
    """
    if not isinstance(load_torch_xla, bool):
        raise TypeError(f"audit: 'load_torch_xla' must be a bool, got {type(load_torch_xla).__name__}")
    xla_version = None
    if load_torch_xla and _optional.is_available("torch_xla"):
        torch_xla = _optional.require("torch_xla", "xlabridge.autocast.audit()")
        _registration.ensure_einsum()
        xla_version = getattr(torch_xla, "__version__", "unknown")
    elif _registration.torch_xla_loaded():
        import torch_xla

        xla_version = getattr(torch_xla, "__version__", "unknown")
    columns = dict(COLUMNS)
    tpu_version = _torch_tpu_version()
    if tpu_version:
        columns[TORCHTPU_COLUMN[0]] = TORCHTPU_COLUMN[1]
    ops = sorted(set().union(*(_probe.registered_ops(key) for key in columns.values())))
    ours = _registration.registered_by_xlabridge()
    rows = []
    for op in ops:
        findings = {column: _probe.probe(op, key) for column, key in columns.items()}
        policies = {column: finding.policy for column, finding in findings.items()}
        rows.append(AuditRow(op, policies, _flags(policies), _note(op, findings), op in ours))
    return AuditReport(tuple(rows), torch.__version__, xla_version, tpu_version)


def _torch_tpu_version() -> str | None:
    """torch_tpu's version where it is loaded (torch's backend autoload imports it with torch)."""
    import sys
    from importlib.metadata import PackageNotFoundError, version

    if "torch_tpu" not in sys.modules:
        return None
    try:
        return version("torch-tpu")
    except PackageNotFoundError:
        return "unknown"

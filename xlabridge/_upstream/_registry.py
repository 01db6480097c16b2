"""The registry of upstream wrappers: the private names each reaches and the releases it was checked on.

``surface`` marks a wrapper of ``xlabridge._upstream.<upstream>``. It records the wrapper in
``SURFACES`` (``tests/upstream`` calls each one in every CI environment), appends the private
names and the checked releases to its docstring, and turns the ``AttributeError`` or
``ImportError`` of a name a release removed into an ``UpstreamChangedError`` that names it, the
installed release and the releases checked. An error raised inside the upstream function itself,
its surface intact, passes through unchanged. Nothing here imports an upstream package before a
wrapper is called.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.metadata
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from xlabridge.errors import UpstreamChangedError

F = TypeVar("F", bound=Callable[..., Any])

DISTRIBUTIONS = {"torch": "torch", "torch_xla": "torch_xla", "torch_tpu": "torch_tpu", "jax": "jax"}
"""Each upstream's importable module and the distribution whose version the messages give."""


@dataclasses.dataclass(frozen=True)
class Surface:
    """One wrapper: what of its upstream it reaches, and where that was checked."""

    upstream: str
    """``torch``, ``torch_xla``, ``torch_tpu`` or ``jax``: the package that must be installed."""
    wrapper: str
    """The wrapper's name in its module (``dispatch_key_set``)."""
    names: tuple[str, ...]
    """The private dotted names it reaches (``torch._C._dispatch_key_parse``)."""
    checked: tuple[str, ...]
    """The releases of ``upstream`` it was checked on (each CI environment's)."""
    attributes: tuple[str, ...] = ()
    """Private attributes it reads off the objects it is given (``_schema`` of an op overload)."""
    missing_from: tuple[str, ...] = ()
    """Releases known to lack it, whose callers handle its ``UpstreamChangedError`` (the test
    checks they raise it)."""
    uses: tuple[str, ...] = ()
    """For an accessor (it returns a private module or class to patch, subclass or read): the
    attributes its callers use, dotted below the returned object (``TpuBackend.__call__``)."""

    @property
    def accessor(self) -> bool:
        return bool(self.uses)

    @property
    def qualified(self) -> str:
        """``torch.dispatch_key_set``: the upstream module's name and the wrapper's."""
        return f"{self.upstream}.{self.wrapper}"

    def describe(self) -> str:
        """The docstring line: what it reaches and where that was checked."""
        reached = ", ".join(f"``{name}``" for name in self.names)
        if self.attributes:
            reached += " (its " + ", ".join(f"``{a}``" for a in self.attributes) + ")"
        line = f"Reaches {reached}; checked on {self.upstream} {', '.join(self.checked)}"
        if self.missing_from:
            line += f"; absent from {self.upstream} {', '.join(self.missing_from)}"
        return line + "."

    def missing(self) -> str | None:
        """The shortest prefix of ``names`` the installed upstream lacks (``torch._C._gone``); None if
        all resolve or the upstream itself is absent (then its ``ImportError`` is the error to see)."""
        try:
            importlib.import_module(self.upstream)
        except ImportError:
            return None
        for name in self.names:
            parts = name.split(".")
            for end in range(2, len(parts) + 1):
                try:
                    resolve(".".join(parts[:end]))
                except (AttributeError, ImportError):
                    return ".".join(parts[:end])
        return None

    def changed(self, name: str) -> UpstreamChangedError:
        """The error for ``name``, missing from the installed release."""
        return UpstreamChangedError(
            f"xlabridge: {name} is not in {self.upstream} {installed_version(self.upstream)}; "
            f"xlabridge._upstream.{self.qualified} reaches it and was checked on {self.upstream} "
            f"{', '.join(self.checked)}: install a release it was checked on, or an xlabridge release "
            f"that supports this one."
        )


SURFACES: dict[str, Surface] = {}
"""Every wrapper, by ``Surface.qualified`` name, in definition order."""


def installed_version(upstream: str) -> str:
    """The installed release of ``upstream``'s distribution (``"not installed"`` if none)."""
    try:
        return importlib.metadata.version(DISTRIBUTIONS.get(upstream, upstream))
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def resolve(name: str) -> Any:
    """The object a dotted name reaches: attributes, or submodules imported where no attribute is."""
    parts = name.split(".")
    value: Any = importlib.import_module(parts[0])
    for index, part in enumerate(parts[1:], start=1):
        try:
            value = getattr(value, part)
        except AttributeError:
            value = importlib.import_module(".".join(parts[: index + 1]))
    return value


def surface(
    upstream: str,
    *names: str,
    checked: tuple[str, ...],
    attributes: tuple[str, ...] = (),
    missing_from: tuple[str, ...] = (),
    uses: tuple[str, ...] = (),
) -> Callable[[F], F]:
    """Register the decorated wrapper as reaching ``names`` of ``upstream``, checked on ``checked``."""
    if upstream not in DISTRIBUTIONS or not names or not checked:
        raise ValueError(f"surface: upstream must be one of {sorted(DISTRIBUTIONS)}, with names and checked releases")

    def decorate(fn: F) -> F:
        info = Surface(upstream, fn.__name__, names, tuple(checked), tuple(attributes), tuple(missing_from),
                       tuple(uses))
        if info.qualified in SURFACES:
            raise ValueError(f"surface: {info.qualified} is registered twice")

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except (AttributeError, ImportError) as error:
                if isinstance(error, UpstreamChangedError):
                    raise
                name = info.missing()
                if name is None:
                    raise
                raise info.changed(name) from error

        wrapper.__doc__ = f"{inspect.cleandoc(fn.__doc__ or '')}\n\n{info.describe()}"
        wrapper.surface = info  # type: ignore[attr-defined]
        SURFACES[info.qualified] = info
        return wrapper  # type: ignore[return-value]

    return decorate

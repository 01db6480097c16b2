"""The one place xlabridge calls NVRTC and the CUDA driver (their public C APIs, through ctypes):
CUDA C++ compiled to a GPU binary at run time, loaded into torch's context and launched on torch's
current stream (so CUDA graphs capture it).

NVRTC is the library torch's CUDA wheels bring (``nvidia/cuda_nvrtc`` for CUDA 12, ``nvidia/cu13``
for CUDA 13), found beside the installed packages or by the dynamic loader; compiling needs no
GPU. The driver is ``libcuda.so.1``, which a machine with a GPU has.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import glob
import hashlib
import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from xlabridge import _env

logger = logging.getLogger(__name__)

_NVRTC_NAMES = ("libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12")


class CudaError(RuntimeError):
    """NVRTC or the CUDA driver returned an error (the message has its text, or NVRTC's log)."""


class NoPtxasReport(CudaError):
    """NVRTC compiled the kernel but its log has no ``ptxas -v`` report (some NVRTC builds leave the
    log empty): the report cannot be read on this machine."""


@functools.cache
def nvrtc() -> ctypes.CDLL:
    """NVRTC: torch's wheel's copy where there is one, else the loader's."""
    for base in sys.path:
        for path in sorted(glob.glob(os.path.join(base or ".", "nvidia", "*", "lib", "libnvrtc.so.*")), reverse=True):
            if "builtins" not in path and "alt" not in path:
                try:
                    return ctypes.CDLL(path)
                except OSError:
                    continue
    for name in _NVRTC_NAMES:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise CudaError("NVRTC (libnvrtc.so) was not found: install torch's CUDA build or the CUDA toolkit")


def nvrtc_version() -> tuple[int, int]:
    major, minor = ctypes.c_int(), ctypes.c_int()
    nvrtc().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


def _check_nvrtc(code: int, lib: ctypes.CDLL) -> None:
    if code:
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        raise CudaError(f"NVRTC: {lib.nvrtcGetErrorString(code).decode()}")


def _compile(source: str, name: str, arch: str, options: Sequence[str]) -> tuple[bytes, str]:
    """NVRTC's binary and log for ``compile_cubin``'s arguments."""
    lib = nvrtc()
    program = ctypes.c_void_p()
    _check_nvrtc(lib.nvrtcCreateProgram(ctypes.byref(program), source.encode(), f"{name}.cu".encode(), 0, None, None), lib)
    try:
        flags = [f"--gpu-architecture=sm_{arch}", "-std=c++17", *options]
        array = (ctypes.c_char_p * len(flags))(*[flag.encode() for flag in flags])
        result = lib.nvrtcCompileProgram(program, len(flags), array)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(program, ctypes.byref(size))
        log = ctypes.create_string_buffer(max(size.value, 1))
        lib.nvrtcGetProgramLog(program, log)
        text = log.value.decode(errors="replace")
        if result:
            raise CudaError(f"NVRTC could not compile {name}:\n{text}")
        size = ctypes.c_size_t()
        _check_nvrtc(lib.nvrtcGetCUBINSize(program, ctypes.byref(size)), lib)
        binary = ctypes.create_string_buffer(size.value)
        _check_nvrtc(lib.nvrtcGetCUBIN(program, binary), lib)
        return binary.raw, text
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))


def compile_cubin(source: str, name: str, arch: str, options: Sequence[str]) -> bytes:
    """The GPU binary of CUDA C++ ``source`` for ``sm_<arch>`` (``"90"``), NVRTC's ``options``
    (``-DNAME=VALUE``) added; ``name`` names the program in NVRTC's messages."""
    return _compile(source, name, arch, options)[0]


@dataclasses.dataclass(frozen=True)
class PtxasReport:
    """What ``ptxas`` says of one kernel it assembled (``-v``): registers per thread, bytes spilled to
    local memory (stores, loads), and its performance warnings, such as ``C7510``-``C7515``: the
    warpgroup MMAs serialized (each waited for before the next is issued)."""

    registers: int
    spill_stores: int
    spill_loads: int
    warnings: tuple[str, ...]


def ptxas_report(source: str, name: str, arch: str, options: Sequence[str]) -> PtxasReport:
    """``compile_cubin``'s compile with ``ptxas -v``, read back from NVRTC's log (never cached)."""
    _, log = _compile(source, name, arch, [*options, "--ptxas-options=-v"])
    registers = re.search(r"Used (\d+) registers", log)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    if registers is None or spills is None:
        raise NoPtxasReport(f"NVRTC {'.'.join(map(str, nvrtc_version()))} ({nvrtc()._name}) logged no ptxas report "
                            f"on {name}: {log[-2000:]!r}")
    warnings = tuple(line.split("Potential Performance Loss:", 1)[1].strip()
                     for line in log.splitlines() if "Potential Performance Loss:" in line)
    return PtxasReport(int(registers.group(1)), int(spills.group(1)), int(spills.group(2)), warnings)


def cache_dir() -> Path:
    """Where compiled kernels are kept: ``$XDG_CACHE_HOME/xlabridge/cuda`` (``~/.cache``)."""
    return _env.cache_home() / "xlabridge" / "cuda"


def cached_cubin(source: str, name: str, arch: str, options: Sequence[str]) -> bytes:
    """``compile_cubin``'s binary, kept on disk (``cache_dir``) under a hash of everything that
    makes it (source, architecture, NVRTC's version, options), so that a later process skips NVRTC."""
    version = ".".join(map(str, nvrtc_version()))
    key = hashlib.sha256("\0".join([source, arch, version, *options]).encode()).hexdigest()[:24]
    path = cache_dir() / f"{name}-{key}.cubin"
    try:
        return path.read_bytes()
    except OSError:
        pass
    code = compile_cubin(source, name, arch, options)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        partial.write_bytes(code)
        partial.replace(path)
    except OSError as error:  # a read-only cache costs a compile per process, nothing else
        logger.debug("CUDA kernel %s: not cached at %s: %s", name, path, error)
    return code


@functools.cache
def driver() -> ctypes.CDLL:
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError as error:
        raise CudaError(f"the CUDA driver (libcuda.so.1) is not there: {error}") from None


def _check(code: int) -> None:
    if code:
        text = ctypes.c_char_p()
        driver().cuGetErrorString(code, ctypes.byref(text))
        raise CudaError(f"CUDA driver: {(text.value or b'error %d' % code).decode()}")


_REGISTERS, _LOCAL_BYTES = 4, 3  # CU_FUNC_ATTRIBUTE_NUM_REGS, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES
_MAX_DYNAMIC_SHARED = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES


class Kernel:
    """A kernel loaded into the context current on this thread (torch's, for its current device).

    ``kernel(grid, block, args, stream, shared)`` launches it: ``args`` are ints (C ``int``) and
    tensors or None (their data pointers), in the kernel's parameter order; ``stream`` is a raw
    ``cudaStream_t`` (``torch.cuda.current_stream().cuda_stream``); ``shared``: bytes of dynamic
    shared memory (``dynamic_shared`` bytes at most)."""

    def __init__(self, binary: bytes, name: str, dynamic_shared: int = 0):
        self._binary = ctypes.create_string_buffer(binary, len(binary))  # kept alive with the module
        self._module = ctypes.c_void_p()
        _check(driver().cuModuleLoadData(ctypes.byref(self._module), self._binary))
        self._function = ctypes.c_void_p()
        _check(driver().cuModuleGetFunction(ctypes.byref(self._function), self._module, name.encode()))
        self.name = name
        if dynamic_shared:  # past 48 KiB with the static part, the driver must be told first
            _check(driver().cuFuncSetAttribute(self._function, _MAX_DYNAMIC_SHARED, dynamic_shared))

    def attribute(self, code: int) -> int:
        value = ctypes.c_int()
        _check(driver().cuFuncGetAttribute(ctypes.byref(value), code, self._function))
        return value.value

    @property
    def registers(self) -> int:
        """Registers per thread."""
        return self.attribute(_REGISTERS)

    @property
    def local_bytes(self) -> int:
        """Local memory per thread: a spill's stack; 0 where nothing spills."""
        return self.attribute(_LOCAL_BYTES)

    def resident(self, threads: int, shared: int) -> int:
        """How many CTAs of ``threads`` threads and ``shared`` bytes of dynamic shared memory an SM
        holds at once, by the driver's count (registers, shared memory, threads): a grid of more
        CTAs than the SMs hold runs in waves."""
        blocks = ctypes.c_int()
        _check(driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(blocks), self._function,
                                                                    threads, ctypes.c_size_t(shared)))
        return blocks.value

    def __call__(self, grid: tuple[int, int, int], block: tuple[int, int, int], args: Sequence, stream: int,
                 shared: int = 0, dependent: bool = False, cluster: tuple[int, int, int] | None = None) -> None:
        """``dependent``: launched to overlap the stream's previous kernel (below) where the driver
        can; ``cluster``: the CTAs of a thread block cluster along each of the grid's dimensions
        (each divides the grid's)."""
        values = [ctypes.c_int(arg) if isinstance(arg, int) else ctypes.c_void_p(0 if arg is None else arg.data_ptr())
                  for arg in args]
        pointers = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values])
        attributes = []
        if dependent and _dependent_launch():
            attributes.append(_attribute(_PROGRAMMATIC_STREAM_SERIALIZATION, 1))
        if cluster is not None and cluster != (1, 1, 1):
            if any(g % c for g, c in zip(grid, cluster)):
                raise ValueError(f"_runtime.Kernel: cluster {cluster} must divide the grid {grid}")
            attributes.append(_attribute(_CLUSTER_DIMENSION, *cluster))
        if attributes:
            array = (_LaunchAttribute * len(attributes))(*attributes)
            config = _LaunchConfig(*grid, *block, shared, ctypes.c_void_p(stream), array, len(attributes))
            _check(driver().cuLaunchKernelEx(ctypes.byref(config), self._function, pointers, None))
            return
        _check(driver().cuLaunchKernel(self._function, *grid, *block, shared, ctypes.c_void_p(stream), pointers, None))


_LOADING = threading.Lock()


def on_device(device_index: int, load: Callable[[], Kernel]) -> Kernel:
    """``load()`` (a ``Kernel`` made) with torch's context of that device current on this thread, one
    load at a time."""
    import torch

    device = torch.device("cuda", device_index)
    with _LOADING, torch.cuda.device(device):
        torch.cuda.current_stream(device)  # torch's context made current on this thread
        return load()


# A dependent launch (programmatic dependent launch, compute capability 9.0 and the driver of CUDA
# 12.3 or newer, stream capture included): the kernel's CTAs may start while the stream's previous
# kernel finishes; its ``griddepcontrol.wait`` waits for that kernel's end and memory (a no-op when
# launched plainly), so whatever it does before reads nothing another kernel may write.
class _LaunchAttribute(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint), ("pad", ctypes.c_uint), ("value", ctypes.c_uint * 16)]


class _LaunchConfig(ctypes.Structure):
    _fields_ = [("grid_x", ctypes.c_uint), ("grid_y", ctypes.c_uint), ("grid_z", ctypes.c_uint),
                ("block_x", ctypes.c_uint), ("block_y", ctypes.c_uint), ("block_z", ctypes.c_uint),
                ("shared", ctypes.c_uint), ("stream", ctypes.c_void_p), ("attributes", ctypes.POINTER(_LaunchAttribute)),
                ("count", ctypes.c_uint)]


_CLUSTER_DIMENSION = 4  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION


def _attribute(code: int, *values: int) -> _LaunchAttribute:
    """A launch attribute whose value is ``values`` as consecutive unsigned ints."""
    return _LaunchAttribute(code, 0, (ctypes.c_uint * 16)(*values))


@functools.cache
def _dependent_launch() -> bool:
    """Whether the driver has ``cuLaunchKernelEx`` and launches dependently (CUDA 12.3's driver, for
    stream capture too): else every launch is plain."""
    version = ctypes.c_int()
    _check(driver().cuDriverGetVersion(ctypes.byref(version)))
    able = version.value >= 12030 and hasattr(driver(), "cuLaunchKernelEx")
    if not able:
        logger.info("CUDA driver %d: kernels launched without overlapping the previous one", version.value)
    return able

"""TPU compile tests: skipped where jax or libtpu is missing; one worker per test module."""

import pytest

from xlabridge import _optional

requires_tpu_compiler = pytest.mark.skipif(
    not (_optional.is_available("jax") and _optional.is_available("libtpu")),
    reason="needs jax and libtpu (pip install 'xlabridge[tpu-compile]')",
)


@pytest.fixture(scope="module")
def compiler(tmp_path_factory):
    if not (_optional.is_available("jax") and _optional.is_available("libtpu")):
        pytest.skip("needs jax and libtpu (pip install 'xlabridge[tpu-compile]')")
    from xlabridge import tpu

    with tpu.TpuCompiler("tpu:v5e", graph_dir=tmp_path_factory.mktemp("tpu-graphs")) as session:
        yield session

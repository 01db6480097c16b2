"""The TorchTPU suite (make test-torchtpu): needs torch_tpu (requirements/torchtpu.txt), and no TPU.

Everything here runs on a machine without a TPU; what needs one is asserted to fail the way
docs/guides/torchtpu.md records, or skipped with the reason.
"""

REASON = "needs torch_tpu: make test-torchtpu (requirements/torchtpu.txt)"


def tpu_present() -> bool:
    from torch_tpu._internal.utils import hardware

    return bool(hardware.get_tpu_device_count())


def pytest_configure(config):
    """No TPU here: libtpu must not spend minutes on the GCE metadata server at the first backward()."""
    from xlabridge import _optional

    if _optional.is_available("torch_tpu"):
        from xlabridge.torchtpu._capture import skip_tpu_metadata_query

        skip_tpu_metadata_query()

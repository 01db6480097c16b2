"""Tests of the torch.compile backend: placement, compile path, options, cache."""

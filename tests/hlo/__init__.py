"""Tests of kernel counts of functions (xlabridge.hlo)."""

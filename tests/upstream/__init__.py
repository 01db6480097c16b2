"""Tests of the upstream wrappers and the import hook (xlabridge._upstream)."""

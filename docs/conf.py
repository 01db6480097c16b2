"""Sphinx configuration of xlabridge's documentation (``make docs``: a strict build)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PJRT_DEVICE", "CPU")

from xlabridge import __version__  # noqa: E402

project = "xlabridge"
author = "the xlabridge authors"
copyright = "the xlabridge authors"
release = version = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "examples"]

myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autosummary_generate = False
napoleon_google_docstring = True  # the docstrings' Args: / Returns: / Raises: sections
napoleon_numpy_docstring = False

html_theme = "furo"
html_title = f"xlabridge {release}"
html_show_sourcelink = False
pygments_style = "sphinx"


def _constant_docstring(app, what, name, obj, options, lines):
    """A re-exported constant's own documentation, not its type's.

    ``xlabridge.tpu.CHIPS`` is defined in a private module and re-exported; autodoc looks for
    its documentation comment in the public module only, finds none and falls back to the
    value's type (``dict``'s docstring). Use the string literal that follows its assignment in
    the private module that defines it, or nothing.
    """
    if what not in ("data", "attribute") or not type(obj).__doc__:
        return
    from sphinx.util.docstrings import prepare_docstring

    if [line for line in lines if line.strip()] != [line for line in prepare_docstring(type(obj).__doc__) if line.strip()]:
        return
    from sphinx.pycode import ModuleAnalyzer

    package, _, attribute = name.rpartition(".")
    found: list[str] = []
    for module_name, module in sorted(sys.modules.items()):
        if not module_name.startswith(package + ".") or getattr(module, attribute, None) is not obj:
            continue
        try:
            docs = ModuleAnalyzer.for_module(module_name).find_attr_docs()
        except Exception:  # a module without source: nothing to read
            continue
        if ("", attribute) in docs:
            found = list(docs[("", attribute)])
            break
    lines[:] = found


def setup(app):
    app.connect("autodoc-process-docstring", _constant_docstring)

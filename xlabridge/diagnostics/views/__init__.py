"""Views of a ``Report``: one section model (``sections.build``), rendered as text and as HTML.

``sections.build(report)`` decides what is shown, in which order, with which columns; the
renderers only lay it out (``text.render``: a terminal table read in ten seconds;
``html.write``: a self-contained page with a picture per FX graph and the report's JSON).
The views read the report; the report module does not import their internals.
"""

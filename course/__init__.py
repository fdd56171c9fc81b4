"""Helpers for the *Transformers, hands-on* notebooks: import each module explicitly (nothing
heavy is imported here); docs/commands.md's "Repository layout" names them."""

import sys

__version__ = "0.1.0"

# jsonschema, which nbformat imports, imports rfc3987_syntax when it is installed (Jupyter pulls
# it in) and builds a grammar at import time: about 1 s of CPU in every process that reads a
# notebook (each grading process, each worker). Nothing here checks IRIs: jsonschema skips that
# optional format when the import fails, which this entry makes it do.
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]

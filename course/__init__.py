"""Helpers for the *Transformers, hands-on* notebooks.

Modules (import them explicitly; nothing heavy is imported here):

* ``course.env``     device, seeding, runtime description, Colab detection
* ``course.check``   the self-check framework used by ``course.checks``
* ``course.checks``  one module of exercise checks per notebook
* ``course.data``    SST-2, CLINC150 and UD English-EWT loaders
* ``course.models``  the pretrained BERT (packaged MiniLM by default)
* ``course.nn``      modules exported from the solution notebooks (generated)
* ``course.viz``     plots shared by several notebooks
* ``course.nbtools`` the notebook tool: generate exercises, export, badges
"""

import sys

__version__ = "0.1.0"

# jsonschema, which nbformat imports, imports rfc3987_syntax when it is installed (Jupyter pulls
# it in) and builds a grammar at import time: about 1 s of CPU in every process that reads a
# notebook (each grading process, each worker). Nothing here checks IRIs: jsonschema skips that
# optional format when the import fails, which this entry makes it do.
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]

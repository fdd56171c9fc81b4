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

__version__ = "0.1.0"

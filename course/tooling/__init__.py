"""The course's own tooling, run by the Makefile and CI, never by a notebook.

:mod:`~course.tooling.nbtools` (notebooks and ``course/nn.py`` generated from the solutions),
:mod:`~course.tooling.refresh` (solutions executed and saved), :mod:`~course.tooling.release`
(the student copy), :mod:`~course.tooling.bench` and :mod:`~course.tooling.budgets` (the
measured times and the budgets they are held to).
"""

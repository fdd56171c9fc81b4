"""The checking framework: what every exercise check is built from.

A notebook's checks (:mod:`course.checks`) declare specs; this package runs them and explains
a failure: :mod:`~course.framework.spec` (the runner), :mod:`~course.framework.properties`
(what a right answer keeps, by concept), :mod:`~course.framework.domains` (the inputs drawn),
:mod:`~course.framework.check` and :mod:`~course.framework.observe` (calling the answer and
recording what it did), :mod:`~course.framework.virtual` (the second device),
:mod:`~course.framework.failure` (the words of a failure), :mod:`~course.framework.sealed`,
:mod:`~course.framework.forbidden` and :mod:`~course.framework.contract` (what a check and the
grader agree on). It imports nothing from the checks, the grader or the tooling.
"""

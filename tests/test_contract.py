"""The statuses, the answer placeholder and the stub pattern are defined once, in course.framework.contract.

Every user imports them from there: the checks (course.framework.check), the notebook generator
(course.tooling.nbtools) and the grader (course.grading). No other module of the package spells them.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from course import grading
from course.framework import check, contract
from course.tooling import nbtools

COURSE = Path(contract.__file__).resolve().parent


def test_every_user_shares_the_contracts_objects():
    for name in ("PASSED", "FAILED", "NOT_IMPLEMENTED", "ERROR"):
        assert getattr(check, name) is getattr(contract, name)
    for name in (*[s for s in dir(contract) if s.isupper()],):
        if hasattr(grading, name):
            assert getattr(grading, name) is getattr(contract, name), name
    assert nbtools.ANSWER_PLACEHOLDER is contract.ANSWER_PLACEHOLDER
    assert grading.STUB is contract.STUB
    assert set(contract.ALL_STATUSES) == {
        contract.PASSED,
        contract.FAILED,
        contract.NOT_IMPLEMENTED,
        contract.ERROR,
        contract.TIMEOUT,
        contract.MISSING,
    }


def test_what_the_generator_writes_is_what_the_grader_recognises():
    stub = nbtools.stub_code(
        "def f(x):\n    ### BEGIN SOLUTION double it\n    return 2 * x\n    ### END SOLUTION"
    )
    assert contract.STUB.search(stub) and stub.strip().splitlines()[1].strip().startswith(
        contract.STUB_TODO
    )
    assert grading.is_answer_cell(nbformat.v4.new_code_cell(stub))
    written = nbtools.stub_markdown(
        "### Question\n<!-- BEGIN ANSWER -->\nmine\n<!-- END ANSWER -->"
    )
    assert contract.ANSWER_PLACEHOLDER in written
    assert grading.is_answer_cell(nbformat.v4.new_markdown_cell(written))


def test_no_other_module_spells_them():
    placeholder = re.escape(contract.ANSWER_PLACEHOLDER)
    spelled = {
        "the answer placeholder": re.compile(placeholder),
        "the stub pattern": re.compile(r"raise NotImplementedError\\s\*\$"),
        "the status names": re.compile(r"^PASSED\b[^\n]*=", re.MULTILINE),
        "the forbidden modules": re.compile(r"=\s*\(\s*\"course\.checks\""),
    }
    offenders = [
        f"{path.relative_to(COURSE.parent)} defines {what}"
        for path in sorted(COURSE.rglob("*.py"))
        if path.name != "contract.py"
        for what, pattern in spelled.items()
        if pattern.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_the_grading_machinery_is_no_answer_s_import_and_the_course_s_helpers_are():
    from course.grading.verdict import forbidden

    for line in (
        "import course.framework.sealed as s",
        "from course.framework import sealed",
        "from course.framework.spec import judging",
        "import course.grading.instrument",
        "__import__('course.framework.observe')",
    ):
        assert forbidden(line), line
    for line in (  # what the solutions import in their answers
        "from course import data, env, models, viz",
        "from course.nn import scaled_dot_product_attention",
        "from course.measure import best_time, peak_memory",
    ):
        assert not forbidden(line), line

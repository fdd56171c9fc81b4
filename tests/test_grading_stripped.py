"""The check modules a student's process imports while grading hold no answer (course.grading.stripped).

Each test reads the private course copy a graded notebook gets, imported in an interpreter of
its own (as the student's process imports it), beside the grader's own modules: what computes
a right answer in the grader's is a stub that raises in the copy, and what a probe records is
the same in both.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from course.grading import kernel, stripped

ROOT = Path(__file__).resolve().parents[1]

# In the copy: every function of the check modules, each spec's reference and each mistake's,
# each property's judge, by whether it is the stub; and a probe of 0.1 on the given answer.
SEEN = """
import functools, gc, json, sys, types, torch
import course, course.checks, pkgutil, importlib
modules = {i.name: importlib.import_module(f"course.checks.{i.name}")
           for i in pkgutil.iter_modules(course.checks.__path__)}
STUB = sys.argv[1]
def stub(f):
    while isinstance(f, functools.partial):
        f = f.func
    return getattr(f, "__name__", "") == STUB or STUB in getattr(
        getattr(f, "__code__", None), "co_names", ())
functions = {f"{f.__module__}.{f.__qualname__}": stub(f) for f in gc.get_objects()
             if isinstance(f, types.FunctionType) and (f.__module__ or "").startswith("course.checks")}
specs = []
for module in modules.values():
    for value in vars(module).values():
        spec = getattr(value, "spec", None)
        for s in spec if isinstance(spec, tuple) else (spec,) if spec is not None else ():
            specs.append({"name": s.name, "reference": stub(s.reference),
                          "mistakes": [stub(m.reference) for m in s.mistakes],
                          "judges": [stub(p.judge) or p.judge.__module__.startswith("course.framework.properties")
                                     for p in s.properties]})
from course.framework.check import probe
namespace = {"torch": torch}
exec(sys.argv[2], namespace)
_, record = probe(modules["nb00"].softmax, namespace["softmax"], seed=5)
loaded = sorted({m.split(".")[0] for m in sys.modules} & {"peft", "scipy", "sklearn"})
print(json.dumps({"file": course.checks.__file__, "functions": functions, "specs": specs,
                  "record": record.hex(), "loaded": loaded}))
"""


@pytest.fixture(scope="module")
def seen(tmp_path_factory):
    """What the student's copy holds, imported in an interpreter of its own."""
    scratch = tmp_path_factory.mktemp("copy")
    kernel.private_course(scratch, kernel._files(kernel.COURSE), 11)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(scratch), OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-c", SEEN, stripped.ABSENT, _solved_softmax()],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "scratch": scratch}


def _solved_softmax() -> str:
    import nbformat

    solution = nbformat.read(ROOT / "solutions" / "00_welcome.ipynb", as_version=4)
    return next(c.source for c in solution.cells if c.source.startswith("def softmax"))


def _named(function: object) -> str | None:
    """``module.name`` of a module-level function behind ``function`` (a partial's too)."""
    while isinstance(function, functools.partial):
        function = function.func
    name = getattr(function, "__qualname__", "<")
    return None if "<" in name else f"{function.__module__}.{name}"


def _grader_answers() -> set[str]:
    """Every module-level function the grader's own checks use as a reference, a mistake's
    reference or a judge (lambdas are checked through the specs themselves)."""
    import importlib
    import pkgutil

    import course.checks

    found = set()
    for info in pkgutil.iter_modules(course.checks.__path__):
        module = importlib.import_module(f"course.checks.{info.name}")
        for value in vars(module).values():
            spec = getattr(value, "spec", None)
            for s in spec if isinstance(spec, tuple) else (spec,) if spec is not None else ():
                callables = [s.reference, *(m.reference for m in s.mistakes)]
                callables += [p.judge for p in s.properties]
                found |= {n for n in map(_named, callables) if n and "course.checks" in n}
    return found


def test_the_student_imports_its_copy_of_the_checks(seen):
    assert seen["file"] == str(seen["scratch"] / "course" / "checks" / "__init__.py")


def test_no_spec_reference_mistake_or_judge_computes_anything_in_the_copy(seen):
    assert len(seen["specs"]) > 40  # every notebook's checks were read
    computing = [
        (s["name"], what)
        for s in seen["specs"]
        for what, stubs in (("reference", [s["reference"]]), ("mistakes", s["mistakes"]))
        if not all(stubs)
    ]
    judging = [s["name"] for s in seen["specs"] if not all(s["judges"])]
    assert (computing, judging) == ([], [])


def test_every_function_the_grader_uses_as_an_answer_is_a_stub_in_the_copy(seen):
    answers = _grader_answers() | {
        f"course.checks.reference.{n}" for n in ("sinusoid_table", "attention", "multi_head")
    }
    assert len(answers) > 30
    left = sorted(a for a in answers if seen["functions"].get(a) is not True)
    assert left == []


def test_a_probe_records_the_same_with_the_copy_as_with_the_graders_checks(seen):
    from course.checks import nb00
    from course.framework.check import probe

    namespace: dict = {}
    exec(_solved_softmax(), namespace)  # noqa: S102 - the course's own solution
    _, record = probe(nb00.softmax, namespace["softmax"], seed=5)
    assert bytes.fromhex(seen["record"]) == record


def test_the_libraries_only_references_use_are_not_imported_in_the_copy(seen):
    # peft is notebook 10's reference, scipy's and sklearn's classes notebook 8's: the grader
    # imports them (test_the_stub_raises_...), the student's process, probing, never needs them.
    assert seen["loaded"] == []


MODULES = {
    "checks/nb01.py": (
        "from __future__ import annotations\n"
        "import math\n"
        "import json, re\n"
        "import torch.nn.functional as F\n"
        "from peft import LoraConfig, get_peft_model\n"
        "from course.framework import spec\n"
        "from course.framework.spec import Case\n"
        "def _reference(x):\n"
        "    return LoraConfig(r=math.floor(x))\n"
        "def _helper(x: get_peft_model):\n"
        "    return json.dumps(x)\n"
        "def _kept(x):\n"
        "    return F.relu(x)\n"
        "SPEC = spec.Spec(reference=_reference, cases=[Case(_kept), _helper])\n"
    ),
    "checks/nb02.py": "from course.checks.nb01 import re\nPATTERN = re.compile('x')\n",
}


def test_an_import_only_a_reference_reads_is_dropped_every_other_kept():
    out = {n: ast.parse(t) for n, t in stripped.strip(MODULES).items()}
    imports = sorted(
        f"{getattr(s, 'module', None) or ''}:{a.name}"
        for s in out["checks/nb01.py"].body
        if isinstance(s, ast.Import | ast.ImportFrom)
        for a in s.names
    )
    # math and LoraConfig: read by the reference alone, gone with it; the rest is read by
    # code that stays (json by a helper, get_peft_model by its signature, re by nb02, F by
    # _kept), and course's own imports and __future__ are never touched.
    assert imports == [
        ":json",
        ":re",
        ":torch.nn.functional",
        "__future__:annotations",
        "course.framework.spec:Case",
        "course.framework:spec",
        "peft:get_peft_model",
    ]


def test_the_stub_raises_and_the_graders_own_modules_are_untouched():
    from course.checks import nb00

    with pytest.raises(RuntimeError, match="grader's trusted process"):
        exec(stripped._STUB + f"\n{stripped.ABSENT}()", {})  # noqa: S102 - our own stub
    assert nb00.softmax.spec.reference.__name__ == "<lambda>"
    files = kernel._files(kernel.COURSE)
    copy = stripped.for_students(files)
    assert set(copy) == set(files)
    assert [n for n in files if copy[n] != files[n]] == sorted(
        n for n in files if n.startswith("checks/nb") or n == "checks/reference.py"
    )

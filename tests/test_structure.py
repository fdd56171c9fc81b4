"""The package's shape: no import circle in ``course/``, imports toward the framework; every exercise check is a spec or says
why not; no check types the words of a violated property (``CheckFailure`` composes them from
the property it is given); checking code is counted by one rule (:func:`checking_lines`). No line cap: what is
measured is what a newcomer reads to add one exercise (CONTRIBUTING), not the total."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

COURSE = Path(__file__).resolve().parents[1] / "course"
# All checking code is counted together: every module of course/ but these, each with why it
# is not checking code. A new module counts unless it is added here with a reason.
NOT_CHECKING = {
    "grading": "the grading engine: runs hand-ins and merges verdicts; it judges nothing itself",
    "nn": "the modules the notebooks build, generated from the solutions",
    "data": "the course's data sets",
    "models": "the pretrained BERT the notebooks fine-tune",
    "env": "device, precision and seeding of a notebook",
    "viz": "plots",
    "tooling": "generator, solution runs, student copy, benchmark and time budgets",
    "classroom": "progress, grades and feedback for a class",
    "handins": "reads hand-ins",
    "framework/contract": "names shared by the checks, the generator and the grader",
    "measure": "times and memory of a notebook's cells",
}
# Checks written as a function, not one spec, each with why: none (a model changed in place, or
# two functions applied in turn, is a case of several calls: Spec.calls, Spec.watch, Spec.together).
NOT_SPECS: set[tuple[str, str]] = set()


def _module_name(path: Path) -> str:
    parts = path.relative_to(COURSE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Every course module and the course modules it imports, at any depth of its code."""
    modules: dict[str, set[str]] = {}
    for path in COURSE.rglob("*.py"):
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("course"):
                found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("course")}
        modules[_module_name(path)] = found
    return {m: {d for d in found if d in modules and d != m} for m, found in modules.items()}


def test_no_import_circle_in_course() -> None:
    graph = _imports()
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dependency in sorted(graph[module]):
            assert state.get(dependency) != 1, " -> ".join([*path, module, dependency])
            if dependency not in state:
                visit(dependency, [*path, module])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])


# The three parts of course/ (docs/DESIGN.md draws them): what the notebooks import, the checking
# framework, and the course's own tooling, beside the grader. Imports run one way: toward the
# framework. Each part, and the parts it may not import.
STUDENTS = ("course.env", "course.data", "course.models", "course.nn", "course.viz")
STUDENTS += ("course.measure", "course.checks")
MAY_NOT_IMPORT = {
    ("course.framework",): ("course.checks", "course.tooling", "course.grading"),
    STUDENTS: ("course.tooling", "course.grading", "course.classroom", "course.handins"),
}


def _in(module: str, parts: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in parts)


def wrong_way_imports(graph: dict[str, set[str]]) -> list[str]:
    """``importer -> imported`` for each import in ``graph`` against :data:`MAY_NOT_IMPORT`."""
    return sorted(
        f"{module} -> {dependency}"
        for module, dependencies in graph.items()
        for part, banned in MAY_NOT_IMPORT.items()
        if _in(module, part)
        for dependency in dependencies
        if _in(dependency, banned)
    )


def test_imports_run_toward_the_framework() -> None:
    graph = _imports()
    assert {"course.framework.spec", "course.checks.nb00", "course.tooling.nbtools"} <= set(graph)
    assert not wrong_way_imports(graph), wrong_way_imports(graph)


def test_an_import_against_the_arrows_is_found() -> None:
    graph = {
        "course.framework.spec": {"course.checks.reference"},
        "course.checks.nb00": {"course.framework.spec"},
        "course.viz": {"course.tooling.budgets"},
        "course.tooling.nbtools": {"course.framework.contract", "course.checks"},
    }
    assert wrong_way_imports(graph) == [
        "course.framework.spec -> course.checks.reference",
        "course.viz -> course.tooling.budgets",
    ]


def test_every_exercise_check_is_a_declared_spec() -> None:
    """A check cell's function carries its spec (``check(Spec(...))``), or is listed above."""
    missing = []
    for path in sorted((COURSE / "checks").glob("nb*.py")):
        module = importlib.import_module(f"course.checks.{path.stem}")
        for name, value in vars(module).items():
            if (
                callable(value)
                and hasattr(value, "exercise")
                and (path.stem, name) not in NOT_SPECS
            ):
                if not hasattr(value, "spec"):
                    missing.append(f"{path.stem}.{name}")
    assert not missing, missing


def test_no_check_types_the_words_of_a_violated_property() -> None:
    """The checks and the shared properties pass a failure its property (``expect(..., prop=...)``, ``CheckFailure(...,
    prop=...)``, a ``Property``'s name); the words "the property violated:" are written by
    course.framework.failure alone, so no check's text can drift from the property it records."""
    typed = []
    for path in sorted(
        [*(COURSE / "checks").glob("*.py"), *(COURSE / "framework" / "properties").glob("*.py")]
    ):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if "violated:" in node.value.lower() or node.value.lower().endswith("violated"):
                    typed.append(f"{path.name}:{node.lineno}: {node.value[:60]!r}")
    assert not typed, typed


def checking_lines() -> dict[str, int]:
    """Lines of every checking module: each ``.py`` file of ``course/`` whose
    top-level module is not in :data:`NOT_CHECKING`."""
    return {
        str(path.relative_to(COURSE.parent)): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(COURSE.rglob("*.py"))
        if not _excluded(path.relative_to(COURSE).with_suffix("").parts)
    }


def _excluded(parts: tuple[str, ...]) -> bool:
    """Whether a module (its path's parts in course/) is, or lies in, a :data:`NOT_CHECKING` entry."""
    return any("/".join(parts[:n]) in NOT_CHECKING for n in range(1, len(parts) + 1))


def test_checking_code_is_counted_by_one_rule() -> None:
    """Every excluded name is a module of course/ with a reason; the count covers the rest."""
    absent = [
        n for n in NOT_CHECKING if not (COURSE / n).is_dir() and not (COURSE / f"{n}.py").is_file()
    ]
    assert not absent, absent
    assert all(reason.strip() for reason in NOT_CHECKING.values())
    counted = checking_lines()
    assert "course/framework/spec.py" in counted and "course/checks/nb00.py" in counted
    assert not any(
        name.startswith(("course/grading/", "course/nn.py", "course/tooling/")) for name in counted
    )


# --- claims: what only the student's process observes decides no point -----------------------

# A reading of the student's objects whose right value the grader cannot compute for its own
# inputs: an identity, a mode or grad flag, a storage address. Inside an observed call its
# result is a claim: judged only through course.framework.observe.claim (a note while grading).
CLAIM_ATTRIBUTES = {"training", "requires_grad", "is_leaf", "data_ptr"}
CLAIM_CALLS = {"is_grad_enabled", "id"}
CLAIM_SOURCES = [COURSE / "framework" / "spec.py", *(COURSE / "checks").glob("*.py")]
CLAIM_SOURCES += [*(COURSE / "framework" / "properties").glob("*.py")]


def _called(node: ast.AST) -> str:
    """The name a call calls: ``f`` for ``f(...)`` and ``x.f(...)``."""
    func = node.func if isinstance(node, ast.Call) else node
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")


def _reads_claim(node: ast.AST, tainted: set[str], readers: set[str]) -> bool:
    """Whether ``node``'s value reads a claim: ``a is b`` (but ``is None`` and ``type(a) is
    T``), a claim attribute or call, a function that returns one, a name holding one (a claim
    that only chooses between values, ``a if claim else b``, is not the value)."""
    for sub in _walk_values(node):
        if isinstance(sub, ast.Compare) and any(isinstance(o, ast.Is | ast.IsNot) for o in sub.ops):
            operands = [sub.left, *sub.comparators]
            if not any(
                (isinstance(o, ast.Constant) and o.value is None)
                or (isinstance(o, ast.Call) and _called(o) == "type")
                for o in operands
            ):
                return True
        if isinstance(sub, ast.Attribute) and sub.attr in CLAIM_ATTRIBUTES:
            return True
        if isinstance(sub, ast.Call) and _called(sub) in CLAIM_CALLS | readers:
            return True
        if isinstance(sub, ast.Name) and sub.id in tainted:
            return True
    return False


def _walk_values(node: ast.AST) -> list[ast.AST]:
    """``ast.walk`` but for the tests of conditional expressions."""
    found, stack = [], [node]
    while stack:
        sub = stack.pop()
        found.append(sub)
        stack += [
            c
            for c in ast.iter_child_nodes(sub)
            if not (isinstance(sub, ast.IfExp) and c is sub.test)
        ]
    return found


def _tainted(function: ast.AST, readers: set[str]) -> set[str]:
    """The names in ``function`` that hold a claim: assigned one, or appended one."""
    tainted: set[str] = set()
    while True:
        before = set(tainted)
        for sub in ast.walk(function):
            if isinstance(sub, ast.Assign | ast.AugAssign | ast.AnnAssign) and sub.value:
                targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                value: ast.AST = sub.value
            elif isinstance(sub, ast.Call) and _called(sub) in ("append", "add", "extend"):
                targets, value = [sub.func.value], ast.Tuple(elts=sub.args)  # type: ignore[union-attr]
            else:
                continue
            if _reads_claim(value, tainted, readers):
                tainted |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        if tainted == before:
            return tainted


def _functions(tree: ast.AST) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}


def _claim_readers(trees: list[ast.AST], known: set[str] = frozenset()) -> set[str]:
    """Functions of ``trees`` whose result is itself a claim (not a dict of observations), as
    ``course.framework.properties.modes``; ``known``: those of the modules they import."""
    readers: set[str] = set(known)
    while True:
        before = set(readers)
        for tree in trees:
            for name, function in _functions(tree).items():
                tainted = _tainted(function, readers)
                for sub in ast.walk(function):
                    if isinstance(sub, ast.Return) and sub.value is not None:
                        if not isinstance(sub.value, ast.Dict):
                            if _reads_claim(sub.value, tainted, readers):
                                readers.add(name)
        if readers == before:
            return readers


def _observed(tree: ast.AST) -> list[ast.AST]:
    """The callables a check runs inside ``observe``: the second argument of each call, each
    ``watch=`` of a spec, and the functions of the module they call, at any depth."""
    functions = _functions(tree)
    found: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called(node) == "observe" and len(node.args) > 1:
            found.append(node.args[1])
        if isinstance(node, ast.Call):
            found += [k.value for k in node.keywords if k.arg == "watch"]
    seen: list[ast.AST] = []
    while found:
        node = found.pop()
        if isinstance(node, ast.Name):
            node = functions.get(node.id)
        if node is None or any(node is s for s in seen):
            continue
        seen.append(node)
        found += [c.func for c in ast.walk(node) if isinstance(c, ast.Call)]
    return seen


def _claim_keys(tree: ast.AST, readers: set[str]) -> set[str]:
    """The keys under which an observed callable returns a claim."""
    keys = set()
    for function in _observed(tree):
        tainted = _tainted(function, readers)
        for sub in ast.walk(function):
            if isinstance(sub, ast.Dict):
                for key, value in zip(sub.keys, sub.values, strict=True):
                    if isinstance(key, ast.Constant) and _reads_claim(value, tainted, readers):
                        keys.add(key.value)
    return keys


def _judges(function: ast.AST) -> bool:
    """Whether ``function`` judges other than through claim(): ``expect*`` or ``raise``."""
    return any(
        isinstance(n, ast.Raise) or (isinstance(n, ast.Call) and _called(n).startswith("expect"))
        for n in ast.walk(function)
    )


def claims_judged_as_values(sources: list[Path]) -> list[str]:
    """Where a claim read in an observed callable is judged by ``expect``, a raise or a value
    comparison (``watched``), rather than through ``course.framework.observe.claim`` (or a ``claim_*``
    property that calls it alone)."""
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in sources}
    shared = _claim_readers([t for p, t in trees.items() if p.parent.name == "properties"])
    found = []
    for path, tree in trees.items():
        keys = _claim_keys(tree, _claim_readers([tree], shared))
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == "watched":
                for item in ast.walk(node.value):
                    if isinstance(item, ast.Constant) and item.value in keys:
                        found.append(
                            f"{path.name}:{item.lineno}: {item.value!r} compared as a value"
                        )
        for function in _functions(tree).values():
            if function.name.startswith("claim_") and _judges(function):
                found.append(f"{path.name}:{function.lineno}: {function.name} judges with expect")
            inside = {
                id(s)
                for call in ast.walk(function)
                if isinstance(call, ast.Call) and _called(call).startswith("claim")
                for s in ast.walk(call)
            }
            loose = [
                s
                for s in ast.walk(function)
                if isinstance(s, ast.Subscript)
                and isinstance(s.slice, ast.Constant)
                and s.slice.value in keys
                and id(s) not in inside
            ]
            if loose and _judges(function):
                found += [
                    f"{path.name}:{s.lineno}: {s.slice.value!r} judged by expect" for s in loose
                ]
    return sorted(set(found))


def test_a_claim_of_the_students_process_is_judged_only_through_claim() -> None:
    """An identity, a mode, a grad flag read where the student's code runs can be forged there
    at no cost: it reaches a verdict only through course.framework.observe.claim, a failure in the
    notebook and a note, never a point, while grading."""
    assert not claims_judged_as_values(CLAIM_SOURCES)


def test_the_claim_rule_sees_a_claim_judged_as_a_value(tmp_path: Path) -> None:
    """The rule above on a check written both ways: judged by expect (found), through claim."""
    body = (
        "def watch(layer, base):\n"
        "    return {{'kept': layer.base is base, 'out': layer(1)}}\n\n"
        "def body(layer, base):\n"
        "    seen = observe('made', lambda: watch(layer, base))\n"
        "    expect(seen['out'] == 2, 'wrong output')\n"
        "    {}(seen['kept'], 'a copy')\n"
    )
    judged, claimed = tmp_path / "judged.py", tmp_path / "claimed.py"
    judged.write_text(body.format("expect"), encoding="utf-8")
    claimed.write_text(body.format("claim"), encoding="utf-8")
    assert claims_judged_as_values([judged]) == ["judged.py:7: 'kept' judged by expect"]
    assert claims_judged_as_values([claimed]) == []

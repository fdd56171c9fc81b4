"""The check modules as a student's process gets them while grading: every answer taken out.

While a class is graded, the student's process only *probes* (:mod:`course.framework.observe`): it calls
the student's code and records what comes back; the grader's trusted process replays the record
and alone computes what is right (:func:`course.framework.spec.judging`). So nothing that computes or
holds a right answer needs to be, or is, in the student's process. Its private course copy
(:func:`course.grading.kernel.private_course`) gets ``course/checks`` rewritten by
:func:`for_students`, from the grader's in-memory snapshot, before any student process starts:

* every ``reference=`` and ``judge=`` argument (and ``"judge"`` entry of a dict of a
  property's fields), a :class:`~course.framework.spec.Mistake`'s reference (its third argument) and a
  :class:`~course.framework.spec.Property`'s judge (its second) becomes a stub that raises;
* every ``if judging():`` block loses its body (it never runs in a probe);
* then, until nothing changes, every function of a check module that no remaining code names,
  and every private module-level value no remaining code names, loses its body or value: the
  helpers only a reference used (``course/checks/reference.py``'s attention, the sinusoid
  table) are gone with it;
* last, every module-level import of a package outside the course that no remaining code
  names is dropped: the libraries only a reference used (``peft`` in notebook 10's checks,
  ``scipy`` and ``sklearn``'s in notebook 8's) are not imported in the student's process,
  where they cost seconds of CPU per notebook and compute nothing.

What the probe needs stays as it was: the cases and their inputs, the domains, the call forms,
the properties' observations, the modules' builds. An answer that walks frames, ``gc`` or
``sys.modules`` to the running check finds a spec whose reference raises. The trusted replay
imports the grader's own, untouched modules (:func:`course.grading.verdict.trusted_checks`).

What the student's process can read on disk besides its copy depends on the sandbox
(:mod:`course.grading.sandbox`; docs/grading.md's "What is not protected").
"""

from __future__ import annotations

import ast
import hashlib

ABSENT = "_absent_while_grading"
PREFIX = "checks/"
# Arguments that hold a right answer or a judgement, by keyword; by position in these classes.
_KEYWORDS = {"reference", "judge"}
_POSITIONAL = {"Mistake": 2, "Property": 1}
_STUB = f'''
def {ABSENT}(*args, **kwargs):
    """Stands for a reference or a judgement: these live in the grader's process only."""
    raise RuntimeError(
        "a check's reference or judgement was called in the student's process while grading; "
        "it exists only in the grader's trusted process (a bug in the check if a probe got here)"
    )
'''


def _stub_body(node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
    node.body = [ast.Expr(ast.Call(ast.Name(ABSENT, ast.Load()), [], []))]
    node.decorator_list = []
    node.returns = None


class _TakeOut(ast.NodeTransformer):
    """References, judges and ``if judging():`` bodies out of one module."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        for keyword in node.keywords:
            if keyword.arg in _KEYWORDS:
                keyword.value = ast.Name(ABSENT, ast.Load())
        name = node.func.attr if isinstance(node.func, ast.Attribute) else None
        name = node.func.id if isinstance(node.func, ast.Name) else name
        index = _POSITIONAL.get(name or "")
        if index is not None and len(node.args) > index:
            if not isinstance(node.args[index], ast.Starred):
                node.args[index] = ast.Name(ABSENT, ast.Load())
        return node

    def visit_Dict(self, node: ast.Dict) -> ast.AST:  # ``{"judge": ..., "observe": ...}``
        self.generic_visit(node)
        for k, key in enumerate(node.keys):
            if isinstance(key, ast.Constant) and key.value in _KEYWORDS:
                node.values[k] = ast.Name(ABSENT, ast.Load())
        return node

    def visit_If(self, node: ast.If) -> ast.AST:
        self.generic_visit(node)
        test = node.test
        if isinstance(test, ast.Call) and not test.args and _named(test.func, "judging"):
            node.body = [ast.Pass()]
        return node


def _named(node: ast.AST, name: str) -> bool:
    return (isinstance(node, ast.Name) and node.id == name) or (
        isinstance(node, ast.Attribute) and node.attr == name
    )


def _reads(statement: ast.stmt) -> set[str]:
    """Every identifier ``statement`` reads: names and attributes."""
    found: set[str] = set()
    for node in ast.walk(statement):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
    return found


def _imports(tree: ast.Module, modules: set[str]) -> tuple[dict, dict]:
    """A module's ways to other check modules: ``{local: (module, name)}`` of ``from
    course.checks.nb06 import _tiny_bert`` and ``{alias: module}`` of ``from course.checks
    import reference as ref``, wherever in the module they are written."""
    names: dict[str, tuple[str, str]] = {}
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("course."):
            continue
        if node.module == "course.checks":
            aliases.update({a.asname or a.name: a.name for a in node.names if a.name in modules})
        elif node.module.startswith("course.checks."):
            module = node.module.rsplit(".", 1)[-1]
            names.update({a.asname or a.name: (module, a.name) for a in node.names})
    return names, aliases


def _defined(statement: ast.stmt) -> str | None:
    """The one name a module-level ``def`` or private single assignment defines, else None."""
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
        return statement.name
    if isinstance(statement, ast.Assign | ast.AnnAssign):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        if len(targets) == 1 and isinstance(targets[0], ast.Name):
            name = targets[0].id
            return name if name.startswith("_") and not name.startswith("__") else None
    return None


def _module(path: str) -> str:
    return path.rsplit("/", 1)[-1].removesuffix(".py")


def _used(trees: dict[str, ast.Module], emptied: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """``(module, name)`` of every name the remaining code reads, a definition's own body not
    counted (a recursive helper), a name imported from another check module counted there
    only where the importing module's remaining code reads it."""
    modules = {_module(path) for path in trees}
    used: set[tuple[str, str]] = set()
    for path, tree in trees.items():
        module = _module(path)
        names, aliases = _imports(tree, modules)
        for statement in tree.body:
            own = _defined(statement)
            if (module, own or "") in emptied or isinstance(statement, ast.ImportFrom):
                continue
            reads = _reads(statement) - {own}
            used.update((module, n) for n in reads)
            used.update(names[n] for n in reads if n in names)
            used |= _read_on_modules(statement, aliases)
    return used


def _read_on_modules(statement: ast.stmt, aliases: dict[str, str]) -> set[tuple[str, str]]:
    """``(module, name)`` of every ``alias.name`` that ``statement`` reads on a check module
    imported as ``alias`` (``aliases``: alias -> module)."""
    return {
        (aliases[node.value.id], node.attr)
        for node in ast.walk(statement)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in aliases
    }


def _prune(trees: dict[str, ast.Module]) -> None:
    """Empty every definition no remaining code names, until none is left."""
    emptied: set[tuple[str, str]] = set()
    while True:
        used = _used(trees, emptied)
        dead = {
            (module, name)
            for path, tree in trees.items()
            for statement in tree.body
            if (module := _module(path))
            and (name := _defined(statement)) is not None
            and (module, name) not in emptied
            and (module, name) not in used
            and not (_decorated(statement) and not name.startswith("_"))
        }
        if not dead:
            break
        emptied |= dead
    for path, tree in trees.items():
        module = _module(path)
        for statement in tree.body:
            if (module, _defined(statement) or "") not in emptied:
                continue
            if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
                _stub_body(statement)
            else:
                statement.value = ast.Constant(None)


def _bound(alias: ast.alias) -> str:
    """The name an import binds: ``import a.b`` binds ``a``, ``import a.b as c`` binds ``c``."""
    return alias.asname or alias.name.split(".")[0]


def _outside_course(statement: ast.Import | ast.ImportFrom) -> bool:
    """An import of a package outside the course (never ``__future__`` or a relative one)."""
    if isinstance(statement, ast.ImportFrom):
        modules = [statement.module or ""] if statement.level == 0 else ["course"]
    else:
        modules = [alias.name for alias in statement.names]
    return all(m.split(".")[0] not in ("", "course", "__future__") for m in modules)


def _names_read(trees: dict[str, ast.Module]) -> set[tuple[str, str]]:
    """``(module, name)`` of every name a module's remaining code reads as a variable (its
    imports aside), and of every name another check module imports from it or reads on it."""
    modules = {_module(path) for path in trees}
    read: set[tuple[str, str]] = set()
    for path, tree in trees.items():
        module = _module(path)
        names, aliases = _imports(tree, modules)
        read |= set(names.values())
        for statement in tree.body:
            if isinstance(statement, ast.Import | ast.ImportFrom):
                continue
            read |= {(module, n.id) for n in ast.walk(statement) if isinstance(n, ast.Name)}
            read |= _read_on_modules(statement, aliases)
    return read


def _drop_unused_imports(trees: dict[str, ast.Module]) -> None:
    """Drop what each module-level import of a package outside the course binds and no
    remaining code reads (a stub's signature and another module's import of it count)."""
    read = _names_read(trees)
    for path, tree in trees.items():
        module = _module(path)
        body = []
        for statement in tree.body:
            if isinstance(statement, ast.Import | ast.ImportFrom) and _outside_course(statement):
                statement.names = [a for a in statement.names if (module, _bound(a)) in read]
                if not statement.names:
                    continue
            body.append(statement)
        tree.body = body


def _decorated(statement: ast.stmt) -> bool:
    """A public decorated function: a check itself (``@exercise_check``), always kept."""
    return isinstance(statement, ast.FunctionDef) and bool(statement.decorator_list)


def _with_stub(tree: ast.Module) -> ast.Module:
    """The stub inserted after the docstring and ``from __future__`` imports."""
    at = 0
    for at, statement in enumerate(tree.body):  # noqa: B007 - its index is the point
        docstring = at == 0 and isinstance(statement, ast.Expr)
        future = isinstance(statement, ast.ImportFrom) and statement.module == "__future__"
        if not (docstring or future):
            break
    tree.body[at:at] = ast.parse(_STUB).body
    return tree


def strip(sources: dict[str, str]) -> dict[str, str]:
    """Check modules (name -> source) with their answers taken out, as sources."""
    trees = {name: _TakeOut().visit(ast.parse(text)) for name, text in sources.items()}
    _prune(trees)
    _drop_unused_imports(trees)
    return {
        name: ast.unparse(ast.fix_missing_locations(_with_stub(tree))) + "\n"
        for name, tree in trees.items()
    }


_done: dict[str, dict[str, bytes]] = {}  # the stripped checks of a snapshot, by its digest


def for_students(files: dict[str, bytes]) -> dict[str, bytes]:
    """The course package's files (path in the package -> bytes) as a student's process gets
    them while grading: ``checks/*.py`` stripped (:func:`strip`), every other file as it is.
    Computed once per snapshot (a grader grades every notebook from one)."""
    checks = {
        name: content
        for name, content in files.items()
        if name.startswith(PREFIX) and name.endswith(".py") and name != f"{PREFIX}__init__.py"
    }
    key = hashlib.sha256(b"".join(n.encode() + b"\0" + c for n, c in sorted(checks.items())))
    if key.hexdigest() not in _done:
        sources = {name: content.decode("utf-8") for name, content in checks.items()}
        done = {name: text.encode("utf-8") for name, text in strip(sources).items()}
        _done.clear()  # one snapshot per grading run: the last one kept
        _done[key.hexdigest()] = done
    return {**files, **_done[key.hexdigest()]}

"""What a newcomer reads for one exercise's check: its own lines, and those of what it names.

``python tests/check_lines.py nb03 multi_head_attention [--rev COMMIT]`` prints two numbers:

* own: the source lines of the module-level statements of ``course/checks/<module>.py`` that
  the check's assignment reaches by name, transitively (its spec, mistakes, cases, helpers,
  constants; imports excluded), each statement counted once, decorators and blank lines inside
  it included;
* named: the source lines of the functions and classes of other ``course`` modules those
  statements name (one level deep: what *they* name is not followed), the runner's own types
  (``course.framework.spec``: Spec, Case, Mistake, ...) excluded, as every check names them.

With ``--rev`` the files are read at that git commit (a before/after comparison). A markdown
file in place of the module (``CONTRIBUTING.md softmax``) is measured by its first Python block
under "## Checks": the worked example, whose own lines are what adding an exercise took.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNNER = "spec"  # course.framework.spec: every check names its types: not counted


def _source(path: str, rev: str | None) -> str | None:
    if rev is None:
        file = ROOT / path
        return file.read_text() if file.exists() else None
    shown = subprocess.run(
        ["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    return shown.stdout if shown.returncode == 0 else None


def _names(node: ast.AST) -> set[str]:
    found = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    found |= {  # module.attribute: "ref.multi_head"
        f"{n.value.id}.{n.attr}"
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
    }
    return found


def _defined(statement: ast.stmt) -> set[str]:
    if isinstance(statement, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
        return {statement.name}
    targets = []
    if isinstance(statement, ast.Assign):
        targets = statement.targets
    elif isinstance(statement, ast.AnnAssign):
        targets = [statement.target]
    out = set()
    for target in targets:
        out |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
            out.add(target.value.id)  # "check.spec = ...": part of the check
    return out


def _lines(statement: ast.stmt) -> int:
    first = min([statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", []))])
    return statement.end_lineno - first + 1


def _imports(tree: ast.Module) -> dict[str, tuple[str, str | None]]:
    """``{local name: (module, attribute or None)}`` of the ``course`` imports."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("course"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                is_module = _module_path(full) is not None
                local = alias.asname or alias.name
                out[local] = (full, None) if is_module else (node.module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("course"):
                    out[alias.asname or alias.name] = (alias.name, None)
    return out


def _module_path(module: str) -> str | None:
    base = module.replace(".", "/")
    for path in (f"{base}.py", f"{base}/__init__.py"):
        if (ROOT / path).exists():
            return path
    return None


def _definition_lines(module: str, name: str, rev: str | None) -> int:
    path = _module_path(module)
    text = _source(path, rev) if path else None
    if text is None:
        return 0
    for statement in ast.parse(text).body:
        if name in _defined(statement) and not isinstance(statement, ast.Import | ast.ImportFrom):
            return _lines(statement)
    return 0


def _worked_example(path: str, rev: str | None) -> str | None:
    """The first Python block under "## Checks" of a markdown file."""
    text = _source(path, rev)
    section = text.split("## Checks", 1)[-1] if text else ""
    block = section.split("```python\n", 1)[1:]
    return block[0].split("```", 1)[0] if block else None


def measure(module: str, check: str, rev: str | None = None) -> tuple[int, int]:
    if module.endswith(".md"):
        text = _worked_example(module, rev)
    else:
        text = _source(f"course/checks/{module}.py", rev)
    if text is None:
        raise SystemExit(f"no course/checks/{module}.py at {rev or 'the work tree'}")
    tree = ast.parse(text)
    statements = [s for s in tree.body if not isinstance(s, ast.Import | ast.ImportFrom)]
    by_name: dict[str, list[ast.stmt]] = {}
    for statement in statements:
        for name in _defined(statement):
            by_name.setdefault(name, []).append(statement)
    todo, own = [check], []
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for statement in by_name.get(name, []):
            if statement not in own:
                own.append(statement)
                todo.extend(_names(statement))
    imports = _imports(tree)
    named: set[tuple[str, str]] = set()
    for statement in own:
        for name in _names(statement):
            head, _, attribute = name.partition(".")
            if head not in imports:
                continue
            where, item = imports[head]
            if item is None and attribute:
                named.add((where, attribute))
            elif item is not None and not attribute:
                named.add((where, item))
    named = {(m, n) for m, n in named if m.rsplit(".", 1)[-1] != RUNNER}  # at --rev's path too
    return sum(map(_lines, own)), sum(_definition_lines(m, n, rev) for m, n in named)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("module")
    parser.add_argument("check")
    parser.add_argument("--rev")
    args = parser.parse_args()
    own, named = measure(args.module, args.check, args.rev)
    print(f"{args.module}.{args.check}: own {own} lines, named one level deep {named} lines")


if __name__ == "__main__":
    sys.exit(main())

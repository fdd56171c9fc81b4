"""Every named mistake of every spec, as a student's answer: the wrong variants the check tests
run come from the specs' own tables (``course.framework.spec.Mistake``), so a mistake lives in one place.

``every_mistake()`` yields ``(check, spec, mistake)``; ``answers(check, spec, mistake)`` gives
the check's arguments: the mistake as the student's code in the slot of its spec, the spec's
reference in the others (a check of two functions, 3.1's split and merge).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

import course.checks
import course.nn
from course.framework.spec import Build, Mistake, ModuleSpec, Spec


def specs_of(check: Any) -> tuple[Spec | ModuleSpec, ...]:
    spec = getattr(check, "spec", None)
    return spec if isinstance(spec, tuple) else (spec,) if spec is not None else ()


def every_check() -> Iterator[Any]:
    """Every check of ``course.checks`` that declares its spec(s)."""
    seen: set[int] = set()
    for info in sorted(pkgutil.iter_modules(course.checks.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"course.checks.{info.name}")
        for value in vars(module).values():
            if callable(value) and specs_of(value) and id(value) not in seen:
                seen.add(id(value))
                yield value


def every_mistake() -> Iterator[tuple[Any, Spec | ModuleSpec, Mistake]]:
    for check in every_check():
        for spec in specs_of(check):
            for mistake in spec.mistakes:
                yield check, spec, mistake


def mistake_id(item: tuple[Any, Any, Mistake]) -> str:
    return f"{item[1].exercise} {item[1].name}: {item[2].name}"


def _bind(names: tuple[str, ...], defaults: Mapping, args: tuple, kwargs: dict) -> dict:
    """The arguments of a call by parameter name, defaults filled in."""
    return {**defaults, **dict(zip(names, args, strict=False)), **kwargs}


def function_of(spec: Spec, code: Callable[..., Any]) -> Callable[..., Any]:
    """A reference (or mistake) of a function spec, called as the course calls the student's."""
    if spec.calls:  # a run's reference is already written as the student's code
        return code

    def student(*args: Any, **kwargs: Any) -> Any:
        return code(**_bind(spec.params, spec.defaults, args, kwargs))

    student.__name__ = spec.name
    return student


def _holder(module: nn.Module, dotted: str) -> tuple[nn.Module, str]:
    """The sub-module that holds ``dotted`` (made on the way) and the parameter's own name."""
    *path, last = dotted.split(".")
    for part in path:
        if not hasattr(module, part):
            module.add_module(part, nn.Module())
        module = getattr(module, part)
    return module, last


# modules course.nn does not export: the check tests module that keeps a right one, by name
ELSEWHERE = {"LoRALinear": "tests.test_checks_nb10"}


def _course_module(name: str) -> type[nn.Module] | None:
    """The course's own module of that name: course.nn's, or the check tests' right one."""
    if hasattr(course.nn, name):
        return getattr(course.nn, name)
    return getattr(importlib.import_module(ELSEWHERE[name]), name) if name in ELSEWHERE else None


def module_of(
    spec: ModuleSpec,
    code: Callable[..., Any],
    parameters: Callable[[Build], Mapping[str, tuple[int, ...]]] | None = None,
) -> type[nn.Module]:
    """A module class whose forward is a reference (or mistake) in the spec's form. Built as
    the course's own module (``course.nn``: its attributes, its refusals, its sub-modules) where
    there is one and the mistake keeps its parameters; else from the parameters it declares."""
    base = _course_module(spec.name) if parameters is None else None

    def forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        inputs = _bind(spec.forward, spec.defaults, args, kwargs)
        weights = dict(self.named_parameters())
        return code(self.made, weights, dict(self.named_buffers()), **inputs)

    def __init__(self: nn.Module, *args: Any, **kwargs: Any) -> None:
        made = Build("", _bind(spec.init, spec.init_defaults, args, kwargs), list)
        if base is not None:
            base.__init__(self, *args, **kwargs)
        else:
            nn.Module.__init__(self)
            for name, shape in (parameters or spec.parameters)(made).items():
                holder, last = _holder(self, name)
                holder.register_parameter(last, nn.Parameter(torch.randn(*shape) * 0.1))
        self.made = made

    bases = (base,) if base is not None else (nn.Module,)
    return type(spec.name, bases, {"__init__": __init__, "forward": forward})


def as_student(spec: Spec | ModuleSpec, mistake: Mistake | None = None) -> Any:
    """The mistake (or, with none, the reference) as a student's answer to ``spec``."""
    code = mistake.reference if mistake else spec.reference
    if isinstance(spec, ModuleSpec):
        return module_of(spec, code, mistake.parameters if mistake else None)
    return function_of(spec, code)


def answers(check: Any, spec: Any, mistake: Mistake | None) -> tuple:
    """The check's arguments: ``mistake`` in its spec's slot, the references elsewhere."""
    slots = specs_of(check)
    given = tuple(as_student(s, mistake if s is spec else None) for s in slots)
    if len(slots) == 1 and getattr(spec, "together", False):  # its functions, one per argument
        given = tuple(given[0])
    wanted = len(inspect.signature(check.body).parameters)
    return given[:wanted]

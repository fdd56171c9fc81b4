"""The GitHub Actions workflow for forks (.github/workflows/check.yml).

It cannot run here (no GitHub runner, no network for the downloads), so this checks what
can be checked offline: it is valid YAML, has the shape GitHub requires, runs the documented
test command (docs/commands.md), and caches the datasets under a key made from their published checksums.
"""

from __future__ import annotations

from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "check.yml"


@pytest.fixture(scope="module")
def workflow() -> dict:
    loaded = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    # YAML 1.1 reads the key `on` as True
    loaded["on"] = loaded.pop(True, loaded.get("on"))
    return loaded


def _steps(job: dict) -> list[dict]:
    return job["steps"]


def test_workflow_has_the_required_shape(workflow):
    assert workflow["on"] and workflow["jobs"]
    for name, job in workflow["jobs"].items():
        assert isinstance(job.get("runs-on"), str), name
        assert _steps(job), name
        for step in _steps(job):
            assert ("uses" in step) != ("run" in step), f"{name}: {step}"
            if "uses" in step:
                action, _, version = step["uses"].partition("@")
                assert action and version, step["uses"]


def test_workflow_runs_the_documented_test_command(workflow):
    commands = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    assert "make check" in commands
    runs = [step.get("run", "") for step in _steps(workflow["jobs"]["check"])]
    assert "make check" in runs
    assert runs.index("make data") < runs.index("make check")
    assert any(run.startswith("make setup TORCH=cpu") for run in runs)


def test_datasets_are_cached_under_their_checksums(workflow):
    steps = _steps(workflow["jobs"]["check"])
    cache = next(step for step in steps if step.get("uses", "").startswith("actions/cache@"))
    assert cache["with"]["path"] == "data/downloads"  # where course.data downloads to
    key_step = next(step for step in steps if step.get("id") == "datasets")
    assert "data/README.md" in key_step["run"] and "sha256sum" in key_step["run"]
    assert cache["with"]["key"] == "${{ steps.datasets.outputs.key }}"
    check_step = next(step for step in steps if step.get("run") == "make check")
    assert check_step["env"]["COURSE_OFFLINE"] == "1"  # everything comes from the cache


def test_the_commands_page_says_the_workflow_is_not_run_here():
    commands = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    assert ".github/workflows/check.yml" in commands and "not run in this repository" in commands

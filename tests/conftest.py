"""Tests never touch the network: force every loader onto its offline path."""

import os

import pytest
import torch

os.environ.setdefault("COURSE_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# Every check a test calls is probed and then replayed on the trusted side, which must agree
# (course.framework.check.REPLAY_EVERYWHERE): a check that touches a student object outside observe(),
# or draws inputs the replay cannot redraw, fails every test that calls it.
os.environ["COURSE_CHECK_REPLAY_EVERYWHERE"] = "1"

# Example student submissions (one deliberately not a notebook): data for the grading tests,
# never tests themselves, even when nbval collects notebooks (`make check`).
collect_ignore_glob = ["fixtures/*"]

# The checks compute on tensors of a few hundred numbers: there, extra threads only cost (a
# helper measured a stack check at 2-4 s with one thread and about 60 s with the default under
# a load of 14 on this 2-core machine). Notebooks run in their own kernels, untouched.
torch.set_num_threads(1)


@pytest.fixture
def fresh_models(monkeypatch):
    """Offline, no COURSE_MODEL, nothing cached, no remembered Hub decisions (course.models)."""
    from course import models

    monkeypatch.setenv("COURSE_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("COURSE_MODEL", raising=False)
    monkeypatch.setattr(models, "_hub_state", {})
    monkeypatch.setattr(models, "_hub_tokenizers", set())
    monkeypatch.setattr(models, "is_cached", lambda name: False)  # same result on any machine


@pytest.fixture(scope="session")
def hostile_class(tmp_path_factory):
    """The session's one class of notebook-00 hand-ins, graded once (tests/hostile.py)."""
    from tests import hostile

    return hostile.grade(tmp_path_factory.mktemp("hostile"))

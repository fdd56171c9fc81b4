"""`make setup TORCH=cpu` and `make lab DIR=...`, checked by the commands make would run (-n)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")


def dry_run(*args: str) -> str:
    """What `make -n ARGS` would run (nothing is executed)."""
    done = subprocess.run(
        ["make", "-n", *args], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return done.stdout


def test_setup_with_torch_cpu_uses_pytorchs_cpu_index():
    commands = dry_run("setup", "TORCH=cpu").splitlines()
    torch_line = next(line for line in commands if "download.pytorch.org" in line)
    assert "--index-url https://download.pytorch.org/whl/cpu torch==2.13.0" in torch_line
    # torch comes first, so requirements.txt then finds its pin already satisfied
    assert commands.index(torch_line) < next(
        i for i, line in enumerate(commands) if "-r requirements.txt" in line
    )


def test_default_setup_uses_no_other_index():
    assert "download.pytorch.org" not in dry_run("-B", "setup")


def test_lab_opens_the_folder_asked_for_with_the_projects_settings():
    line = next(
        line for line in dry_run("lab", "DIR=solutions").splitlines() if "jupyter lab" in line
    )
    assert '--notebook-dir="solutions"' in line  # quoted: a folder name may hold spaces
    assert f'--LabApp.app_settings_dir="{ROOT}/jupyter-config/lab-settings"' in line
    default = next(line for line in dry_run("lab").splitlines() if "jupyter lab" in line)
    assert '--notebook-dir="notebooks"' in default


def test_lab_settings_turn_the_news_prompt_off():
    overrides = json.loads(
        (ROOT / "jupyter-config" / "lab-settings" / "overrides.json").read_text()
    )
    assert overrides["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"

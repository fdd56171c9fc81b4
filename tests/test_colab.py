"""The setup cell's Colab branch, played here.

Colab starts a notebook in a Python that already has torch, numpy, matplotlib, scikit-learn
and ipykernel, with ``google.colab`` imported. The setup cell then clones the course and
installs ``requirements-colab.txt``. Two fast tests run that branch in this environment and
make the clone or the install fail: the cell must stop with a sentence saying what to do,
not a ``CalledProcessError`` traceback.

``test_colab_session`` (slow: it builds a fresh virtual environment and pip downloads the
course's packages, several minutes) plays a whole session: torch==2.13.0 and Colab's other
packages pre-installed, a stand-in ``google.colab`` module, the clone taken from this
repository (its committed HEAD) instead of GitHub, then notebook 02 and the data and model
loading of 06 run in that kernel. Run it with::

    COURSE_COLAB_TEST=1 .venv/bin/pytest tests/test_colab.py

``COLAB_TEST_PYTHON`` picks the interpreter (Colab runs 3.12; the default is python3.11,
because the CPU wheel of torch 2.13.0 is installable offline here only for 3.11, and the
Linux wheel on PyPI is the multi-GB CUDA build). ``COLAB_PIP_LOG`` names a file that
receives pip's resolver output for requirements-colab.txt (``--dry-run``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[1]
SETUP_MARK = "# Setup (the same cell opens every notebook)"
# What a Colab runtime already has, at the course's pins (torch first: it is the big one).
COLAB_PREINSTALLED = [
    "torch",
    "numpy",
    "matplotlib",
    "scikit-learn",
    "tqdm",
    "ipykernel",
    "ipywidgets",
]
STAND_IN = 'import sys, types\nsys.modules["google.colab"] = types.ModuleType("google.colab")'


def requirements() -> dict[str, str]:
    """The exact pins of requirements.txt, by lower-case name."""
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.strip().lower()] = version.strip()
    return pins


def setup_cell() -> str:
    nb = nbformat.read(ROOT / "solutions" / "00_welcome.ipynb", as_version=4)
    return next(c.source for c in nb.cells if c.source.startswith(SETUP_MARK))


def run(nb: nbformat.NotebookNode, cwd: Path, kernel: str = "python3", timeout: int = 120):
    """Execute ``nb``; returns the error raised (None when every cell ran)."""
    client = NotebookClient(
        nb, kernel_name=kernel, timeout=timeout, resources={"metadata": {"path": str(cwd)}}
    )
    try:
        client.execute()
    except CellExecutionError as exc:
        return exc
    return None


def outputs_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append(out.get("text", ""))
        parts.append(json.dumps(out.get("data", {})))
        parts.append(out.get("ename", "") + ": " + out.get("evalue", ""))
        parts.extend(out.get("traceback", []))
    return "\n".join(parts)


def colab_setup_only(monkeypatch, tmp_path, repo_url: str, repo_dir: Path):
    """Run the stand-in and the real setup cell in this environment's kernel."""
    monkeypatch.setenv("COURSE_REPO_URL", repo_url)
    monkeypatch.setenv("COURSE_REPO_DIR", str(repo_dir))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(STAND_IN), nbformat.v4.new_code_cell(setup_cell())]
    error = run(nb, tmp_path)
    return error, outputs_text(nb.cells[1])


def test_failed_clone_says_what_to_do(monkeypatch, tmp_path):
    error, text = colab_setup_only(
        monkeypatch, tmp_path, f"file://{tmp_path}/no-such-repo", tmp_path / "course-repo"
    )
    assert error is not None, "the setup cell went on after a failed clone"
    assert "SystemExit: Could not download the course code" in text
    assert "connected to the internet, then run this cell again" in text
    assert "CalledProcessError" not in text and "Traceback" not in text


def test_failed_install_says_what_to_do(monkeypatch, tmp_path):
    repo = tmp_path / "course-repo"  # "already cloned", with a requirements file pip rejects
    repo.mkdir()
    (repo / "requirements-colab.txt").write_text("this is === not a requirement\n")
    error, text = colab_setup_only(monkeypatch, tmp_path, "file:///unused", repo)
    assert error is not None, "the setup cell went on after a failed install"
    assert "SystemExit: Installing the course's packages failed" in text
    assert "Restart session, then run this cell again" in text
    assert "CalledProcessError" not in text and "Traceback" not in text


# ------------------------------------------------------------------- a whole session


def _python() -> str:
    wanted = os.environ.get("COLAB_TEST_PYTHON", "python3.11")
    found = shutil.which(wanted)
    if found is None:
        pytest.skip(f"{wanted} not found (set COLAB_TEST_PYTHON)")
    return found


def _pip(venv: Path, *args: str, log: Path | None = None) -> str:
    result = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", *args],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if log is not None:
        log.write_text(f"$ pip {' '.join(args)}\n{result.stdout}{result.stderr}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def _notebook_06_until_the_model(clone: Path) -> nbformat.NotebookNode:
    """Notebook 06 from the clone, up to the cell that loads the classification model."""
    nb = nbformat.read(clone / "solutions" / "06_bert_finetuning.ipynb", as_version=4)
    last = next(
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and "models.load_model(" in c.source
    )
    nb.cells = nb.cells[: last + 1]
    assert any("data.load_sst2()" in c.source for c in nb.cells)
    return nb


REPORT = (
    "import platform, course, torch, transformers\n"
    "print('course from', course.__file__)\n"
    "print('python', platform.python_version(), '| torch', torch.__version__,\n"
    "      '| transformers', transformers.__version__)"
)


@pytest.mark.skipif(
    os.environ.get("COURSE_COLAB_TEST") != "1",
    reason="slow (fresh venv + pip downloads, minutes): run with COURSE_COLAB_TEST=1",
)
def test_colab_session(monkeypatch, tmp_path):
    venv = tmp_path / "colab-venv"
    subprocess.run([_python(), "-m", "venv", str(venv)], check=True)
    pins = requirements()
    _pip(venv, "install", "-q", *(f"{name}=={pins[name]}" for name in COLAB_PREINSTALLED))
    site = Path(
        subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_path('purelib'))",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "google" / "colab").mkdir(parents=True, exist_ok=True)
    (site / "google" / "colab" / "__init__.py").write_text('"""Stand-in for Colab."""\n')
    (site / "colab_stand_in.pth").write_text("import google.colab\n")  # imported at start-up

    # pip's resolver on requirements-colab.txt over Colab's packages, kept for the record
    log = Path(os.environ.get("COLAB_PIP_LOG") or tmp_path / "colab_pip.log")
    _pip(venv, "install", "--dry-run", "-r", str(ROOT / "requirements-colab.txt"), log=log)

    kernels = tmp_path / "jupyter" / "kernels" / "colab"
    kernels.mkdir(parents=True)
    spec = {
        "argv": [
            str(venv / "bin" / "python"),
            "-m",
            "ipykernel_launcher",
            "-f",
            "{connection_file}",
        ],
        "display_name": "colab stand-in",
        "language": "python",
    }
    (kernels / "kernel.json").write_text(json.dumps(spec))
    content = tmp_path / "content"
    content.mkdir()
    clone = content / "course-repo"
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("COURSE_REPO_URL", f"file://{ROOT}")
    monkeypatch.setenv("COURSE_REPO_DIR", str(clone))
    monkeypatch.setenv("COURSE_OFFLINE", "1")  # the datasets: a mirror if set, else samples
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.delenv("COURSE_DATA_DIR", raising=False)

    # Colab opens a notebook from GitHub, that is from the commit the setup cell clones: a first
    # run of the setup cell alone makes the clone, then 02 and 06 are read from it (their own
    # setup cells find the clone and only re-run pip, as a second notebook in Colab would).
    first = nbformat.v4.new_notebook()
    first.cells = [nbformat.v4.new_code_cell(setup_cell())]
    for name in ("setup", "02", "06"):
        if name == "setup":
            nb = first
        elif name == "02":
            nb = nbformat.read(clone / "solutions" / "02_attention.ipynb", as_version=4)
        else:
            nb = _notebook_06_until_the_model(clone)
        nb.cells.append(nbformat.v4.new_code_cell(REPORT))
        error = run(nb, content, kernel="colab", timeout=900)
        assert error is None, f"notebook {name} failed in the Colab stand-in:\n{error}"
        setup = next(c for c in nb.cells if c.source.startswith(SETUP_MARK))
        assert "| Colab | seed 0" in outputs_text(setup)  # env.in_colab() saw the stand-in
        report = outputs_text(nb.cells[-1])
        assert f"course from {clone}/course/__init__.py" in report
        assert f"torch {pins['torch']}" in report  # requirements-colab.txt left torch alone
        versions = next(line for line in report.splitlines() if line.startswith("python "))
        print(f"notebook {name}: {versions}")
        loads = [c for c in nb.cells if "data.load_sst2()" in c.source]
        if loads:
            print(f"notebook {name}: {outputs_text(loads[0]).strip().splitlines()[0]}")
    assert (clone / ".git").is_dir()

"""models.resolve_model / display_name: the checkpoint that really loads, decided fast, and
notebook 06's CONFIG and labels following it.

Nothing here contacts an outside address: "the Hub" is a server on 127.0.0.1 (HF_ENDPOINT),
one that answers, one that says the model does not exist, one that accepts connections and
never answers (a dead network path), and a closed port (connection refused).
"""

from __future__ import annotations

import http.server
import io
import socket
import threading
import time
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import asdict
from pathlib import Path

import nbformat
import pytest
import torch

from course import models

ROOT = Path(__file__).resolve().parents[1]
NB06 = ROOT / "solutions" / "06_bert_finetuning.ipynb"


# Each test starts with no remembered decisions and no COURSE_MODEL, offline (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("fresh_models")


def online(monkeypatch, endpoint: str) -> None:
    """No offline flag; "the Hub" is ``endpoint`` (a loopback address)."""
    monkeypatch.delenv("COURSE_OFFLINE")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", endpoint)


def _serve(status: int, headers: dict[str, str]):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def hub_ok():
    server = _serve(200, {})
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def hub_unknown():
    server = _serve(401, {"X-Error-Code": "RepositoryNotFound"})
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def hub_silent():
    """Accepts connections and never answers: the slow 'no network' case."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


@pytest.fixture
def hub_refused():
    """A port nobody listens on: connection refused."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"


def test_packaged_and_local_folders_need_no_decision():
    assert models.resolve_model() == models.PACKAGED_MODEL
    assert models.display_name(models.PACKAGED_MODEL) == "all-MiniLM-L6-v2 (packaged)"
    assert models.display_name("bert-base-uncased") == "bert-base-uncased"


def test_offline_not_cached_falls_back_saying_the_flag_is_set(monkeypatch, capsys):
    monkeypatch.setenv("COURSE_MODEL", "bert-base-uncased")
    with pytest.warns(models.ModelFallbackWarning):
        assert models.resolve_model("cuda", prefer_large_on_gpu=True) == models.PACKAGED_MODEL
    err = capsys.readouterr().err
    assert err.count("WARNING") == 1
    assert "COURSE_OFFLINE=1" in err and "not in the Hugging Face cache" in err
    assert "misspelled" not in err
    assert models.display_name("bert-base-uncased") == "all-MiniLM-L6-v2 (packaged)"
    models.resolve_model()  # decided once: no second warning
    assert "WARNING" not in capsys.readouterr().err


def test_offline_and_cached_keeps_the_request(monkeypatch, capsys):
    monkeypatch.setattr(models, "is_cached", lambda name: name == "bert-base-uncased")
    assert models.resolve_model("cuda", prefer_large_on_gpu=True) == "bert-base-uncased"
    assert models._source("bert-base-uncased")[2] == {"local_files_only": True}
    assert "WARNING" not in capsys.readouterr().err


def test_reachable_hub_keeps_the_request(monkeypatch, hub_ok):
    online(monkeypatch, hub_ok)
    monkeypatch.setenv("COURSE_MODEL", "bert-base-uncased")
    assert models.hub_status("bert-base-uncased")[0] == "ok"
    assert models.resolve_model() == "bert-base-uncased"
    assert models._source("bert-base-uncased")[2] == {"local_files_only": False}


def test_unknown_id_says_it_may_be_misspelled(monkeypatch, capsys, hub_unknown):
    online(monkeypatch, hub_unknown)
    monkeypatch.setenv("COURSE_MODEL", "bert-bsae-uncased")
    with pytest.warns(models.ModelFallbackWarning):
        assert models.resolve_model() == models.PACKAGED_MODEL
    err = capsys.readouterr().err
    assert "misspelled" in err and "RepositoryNotFound" in err
    assert "COURSE_OFFLINE" not in err  # it is not set: don't tell anyone to unset it


@pytest.mark.parametrize("hub", ["hub_silent", "hub_refused"])
def test_no_network_fails_over_in_seconds(monkeypatch, capsys, request, hub):
    online(monkeypatch, request.getfixturevalue(hub))
    monkeypatch.setenv("COURSE_MODEL", "bert-base-uncased")
    start = time.perf_counter()
    with pytest.warns(models.ModelFallbackWarning):
        assert models.resolve_model() == models.PACKAGED_MODEL
    elapsed = time.perf_counter() - start
    assert elapsed < models.HUB_PROBE_TIMEOUT + 1.5, elapsed
    err = capsys.readouterr().err
    assert "could not be reached within 3 s" in err and "no network" in err
    assert "unset COURSE_OFFLINE" not in err and "misspelled" not in err


def test_no_network_but_cached_uses_the_cache(monkeypatch, capsys, hub_refused):
    online(monkeypatch, hub_refused)
    monkeypatch.setattr(models, "is_cached", lambda name: True)
    monkeypatch.setenv("COURSE_MODEL", "bert-base-uncased")
    assert models.resolve_model() == "bert-base-uncased"
    assert "cached copy" in capsys.readouterr().err
    assert models._source("bert-base-uncased")[2] == {"local_files_only": True}


def test_loaders_given_a_hub_id_fail_over_fast(monkeypatch, capsys, hub_silent):
    """A notebook that passes a Hub id straight to the loaders gets the fast decision too."""
    online(monkeypatch, hub_silent)
    models.load_tokenizer(models.PACKAGED_MODEL)  # warm up: time only the decision below
    start = time.perf_counter()
    with pytest.warns(models.ModelFallbackWarning):
        tokenizer = models.load_tokenizer("bert-base-uncased")
    assert time.perf_counter() - start < models.HUB_PROBE_TIMEOUT + 3
    assert len(tokenizer) == 30522
    assert "packaged" in capsys.readouterr().out


# ------------------------------------------------------------- notebook 06 follows the decision


def _run_config_cells(device: str) -> tuple[dict, str, str]:
    """Execute notebook 06's cells up to and including the one defining CONFIG, in this
    process, with ``device`` as the notebook's device; returns (namespace, stdout, stderr)."""
    cells = [c.source for c in nbformat.read(NB06, as_version=4).cells if c.cell_type == "code"]
    upto = next(i for i, source in enumerate(cells) if "CONFIG = Config(" in source)
    namespace: dict = {}
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        for i, source in enumerate(cells[: upto + 1]):
            if i == upto:
                namespace["device"] = torch.device(device)
            exec(compile(source, f"{NB06.name} cell {i}", "exec"), namespace)
    return namespace, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_nb06_config_follows_the_model_that_really_loads(monkeypatch, device):
    monkeypatch.setenv("COURSE_MODEL", models.PACKAGED_MODEL)
    packaged, _, _ = _run_config_cells(device)

    monkeypatch.setenv("COURSE_MODEL", "bert-base-uncased")  # offline, not cached
    models._hub_state.clear()
    with pytest.warns(models.ModelFallbackWarning):
        fallen, out, err = _run_config_cells(device)
    assert fallen["MODEL"] == models.PACKAGED_MODEL
    assert asdict(fallen["CONFIG"]) == asdict(packaged["CONFIG"])  # each run defines its own class
    assert "all-MiniLM-L6-v2 (packaged)" in out and "bert-base" not in out
    assert "USING THE PACKAGED" in err

    monkeypatch.setattr(models, "is_cached", lambda name: True)  # the check can fail:
    models._hub_state.clear()
    cached, out, _ = _run_config_cells(device)
    assert cached["MODEL"] == "bert-base-uncased" and "bert-base-uncased" in out
    assert asdict(cached["CONFIG"]) != asdict(packaged["CONFIG"])


def test_nb06_labels_come_from_the_resolved_model():
    """Every label in 06 is built from MODEL through display_name, never from the request."""
    code = "\n".join(
        c.source for c in nbformat.read(NB06, as_version=4).cells if c.cell_type == "code"
    )
    assert "models.resolve_model(device, prefer_large_on_gpu=True)" in code
    assert "model_name(" not in code and "MODEL_NAME" not in code
    assert "display_name(MODEL)" in code

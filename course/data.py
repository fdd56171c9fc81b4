"""The course datasets (SST-2, CLINC150, UD English-EWT) as ``datasets.DatasetDict``s.

    from course import data
    sst2 = data.load_sst2()          # train / validation: sentence, label
    clinc = data.load_clinc150()     # train / validation / test: text, intent, domain, in_scope
    ewt = data.load_ud_ewt()         # train / validation / test: sent_id, text, tokens, upos

Where the data comes from. Each loader tries, in this order, and prints one line naming
the source it used and the split sizes:

1. **prepared**: ``<data dir>/prepared/<name>/`` (data dir = ``$COURSE_DATA_DIR``, default
   ``<repo>/data``; git-ignored). A ``save_to_disk`` copy plus a manifest holding the size
   and sha256 of every file. A copy that fails that check (truncated, edited, half-written)
   is reported, deleted and prepared again from the next source; it is never used.
2. **mirror**: the folder named by ``$COURSE_DATA_MIRROR`` (raw upstream files laid out as
   ``sst2/``, ``clinc150/``, ``ud_english_ewt/``). Every file is verified: size and sha256
   (``_Spec.files``, the same table as data/README.md), then row counts while parsing.
   A mirror file that exists but fails verification raises :class:`DataError`: a corrupt
   mirror is a real problem the user must fix, so it is never silently replaced by the samples.
   (A mirror that lacks the dataset's folder is only skipped, with a note.)
3. **download**: raw files already in ``<data dir>/downloads/`` (verified the same way; a
   damaged one is deleted and fetched again), else fetched from the pinned upstream with a
   progress bar, streamed to a temporary file, verified (size and sha256; SST-2's zip has no
   published checksum, so its two extracted files are checked instead) and only then renamed
   into place (``os.replace``), so an interrupted download never leaves a file
   that passes for good. Skipped, as if there were no network, when ``COURSE_OFFLINE=1`` or
   ``HF_HUB_OFFLINE=1``. A network failure prints one line and falls through; a download
   that completes but has the wrong checksum raises :class:`DataError`.
4. **samples**: the small generated datasets under ``<repo>/data/samples/`` (same raw
   formats, same features), with a loud warning (``SampleDataWarning`` and a line on stderr):
   results on them mean nothing. Get the real data with ``make data`` or set
   ``COURSE_DATA_MIRROR``.

Steps 2 and 3 save a prepared copy, so later calls take step 1 (a second or two).
Samples are never saved as a prepared copy.

Command line (used by ``make data``)::

    python -m course.data prepare [sst2 clinc150 ud_ewt] [--force]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import datasets
from datasets import ClassLabel, Dataset, DatasetDict, Features, List, Value, load_from_disk

from course.env import offline

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES_DIR = REPO_ROOT / "data" / "samples"
# Upstream file name -> the name of our generated stand-in under data/samples/<folder>/.
SAMPLE_NAMES = {
    "train.tsv": "sample_sst2_train.tsv",
    "dev.tsv": "sample_sst2_dev.tsv",
    "data_full.json": "sample_clinc150.json",
    "domains.json": "sample_clinc150_domains.json",
    "en_ewt-ud-train.conllu": "sample_ewt_train.conllu",
    "en_ewt-ud-dev.conllu": "sample_ewt_dev.conllu",
    "en_ewt-ud-test.conllu": "sample_ewt_test.conllu",
}
MANIFEST = "course_manifest.json"
# Bump when the features or the layout of prepared copies change: older copies are rebuilt.
PREPARED_FORMAT = 1

UPOS_TAGS = "ADJ ADP ADV AUX CCONJ DET INTJ NOUN NUM PART PRON PROPN PUNCT SCONJ SYM VERB X".split()
SST2_LABELS = ["negative", "positive"]
OOS = "oos"

CLINC150_COMMIT = "828f8093932c8fe6ca7936c3d2e52903b1c523de"
EWT_TAG = "r2.16"
_CLINC_URL = f"https://raw.githubusercontent.com/clinc/oos-eval/{CLINC150_COMMIT}/data/"
_EWT_URL = f"https://raw.githubusercontent.com/UniversalDependencies/UD_English-EWT/{EWT_TAG}/"
_SST2_ZIP_URL = "https://dl.fbaipublicfiles.com/glue/data/SST-2.zip"


# The words the sample fallback prints; `make check` and `make solutions` look for them.
SAMPLE_DATA_MARKER = "USING THE SMALL SAMPLE DATA"


class DataError(Exception):
    """A data file is present but wrong (truncated, corrupt, unexpected content)."""


class SampleDataWarning(UserWarning):
    """The loader fell back to the small bundled samples: results won't be meaningful."""


class _NetworkError(Exception):
    """A download could not be completed (no network, HTTP error, connection cut)."""


@dataclass(frozen=True)
class _Spec:
    """How to find, verify and parse one dataset."""

    name: str  # key used by the CLI and for data/prepared/<name>
    title: str  # shown to the user
    folder: str  # sub-folder in the mirror, downloads and samples
    files: dict[
        str, tuple[int, str]
    ]  # raw file -> (size in bytes, sha256): data/README.md lists them
    base_url: str | None  # upstream folder of the raw files (None: SST-2's zip, see _fetch_sst2)
    build: Callable[[Path, bool], DatasetDict] = field(repr=False)
    splits: tuple[str, ...] = ("train", "validation", "test")


# ----------------------------------------------------------------------------- settings


def data_dir() -> Path:
    """The folder holding ``prepared/`` and ``downloads/``: ``$COURSE_DATA_DIR`` or <repo>/data."""
    return Path(os.environ.get("COURSE_DATA_DIR") or REPO_ROOT / "data").expanduser()


def _note(message: str) -> None:
    print(message, file=sys.stderr)


def _inside(path: Path, root: Path) -> str | None:
    """``path`` relative to ``root`` (posix), or None when it lies elsewhere."""
    try:
        return Path(os.path.abspath(path)).relative_to(os.path.abspath(root)).as_posix()
    except ValueError:
        return None


def _shown(path: Path) -> str:
    """How a path appears in the one-line source descriptions (and so in stored notebook
    outputs): relative to the repository, or under ``$COURSE_DATA_MIRROR`` /
    ``$COURSE_DATA_DIR``, never as an absolute path of this machine where that can be helped.
    Error messages keep the full path, which the user needs to find the file."""
    mirror = _mirror_root()
    for root, name in [
        (mirror, "$COURSE_DATA_MIRROR"),
        (REPO_ROOT, None),
        (data_dir(), "$COURSE_DATA_DIR"),
    ]:
        rel = None if root is None else _inside(path, root)
        if rel is not None:
            if name is None:
                return rel
            return name if rel == "." else f"{name}/{rel}"
    return str(path)


def _shown_source(source: str) -> str:
    """A stored source such as ``mirror /abs/path`` shown with :func:`_shown` (manifests
    written before paths were shown this way hold absolute paths)."""
    kind, _, where = source.partition(" ")
    return f"{kind} {_shown(Path(where))}" if where.startswith("/") else source


@contextlib.contextmanager
def _quiet_datasets():
    """Hide the "Saving the dataset" bars: writing takes well under a second."""
    was_disabled = datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if not was_disabled:
            datasets.enable_progress_bars()


# ------------------------------------------------------------------------ verification


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _fail(path: Path, what: str, expected: object, found: object, fix: str) -> DataError:
    return DataError(f"{path}: {what}: expected {expected}, found {found}. {fix}")


def _verify_checksums(spec: _Spec, folder: Path, fix: str) -> None:
    """Check presence, size and sha256 of every raw file (cheap size check first).

    The parsers check row counts as well, but an edited sentence keeps them: only the
    checksum catches it.
    """
    for fname, expected in spec.files.items():
        path = folder / fname
        if not path.is_file():
            raise _fail(path, "missing file", "the raw upstream file", "nothing", fix)
        size, sha = expected
        if path.stat().st_size != size:
            raise _fail(path, "size", f"{size} bytes", f"{path.stat().st_size} bytes", fix)
        if (found := _sha256(path)) != sha:
            raise _fail(path, "sha256", sha, found, fix)


def _check_count(path: Path, what: str, expected: int, found: int, strict: bool) -> None:
    if strict and expected != found:
        raise _fail(
            path, what, expected, found, "The file is incomplete or not the pinned version."
        )


# ----------------------------------------------------------------------------- parsers


def _build_sst2(folder: Path, strict: bool) -> DatasetDict:
    """Parse GLUE-style ``train.tsv`` / ``dev.tsv`` (header ``sentence<TAB>label``)."""
    features = Features({"sentence": Value("string"), "label": ClassLabel(names=SST2_LABELS)})
    expected = {"train": (67349, 37569), "validation": (872, 444)}  # (rows, positives)
    splits = {}
    for split, fname in [("train", "train.tsv"), ("validation", "dev.tsv")]:
        path = _raw(folder, fname, strict)
        sentences, labels = [], []
        with open(path, encoding="utf-8", newline="") as f:
            # Sentences hold quote characters: no quoting, one row per line.
            rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
            header = next(rows, None)
            if header != ["sentence", "label"]:
                raise _fail(path, "header", "sentence<TAB>label", header, "Not a GLUE SST-2 file.")
            for lineno, row in enumerate(rows, start=2):
                if len(row) != 2 or row[1] not in {"0", "1"}:
                    raise _fail(
                        path, f"line {lineno}", "<sentence><TAB><0|1>", row, "The file is damaged."
                    )
                sentences.append(row[0])
                labels.append(int(row[1]))
        n_rows, n_pos = expected[split]
        _check_count(path, "rows", n_rows, len(labels), strict)
        _check_count(path, "positive rows", n_pos, sum(labels), strict)
        splits[split] = Dataset.from_dict(
            {"sentence": sentences, "label": labels}, features=features
        )
    return DatasetDict(splits)


def _raw(folder: Path, fname: str, strict: bool) -> Path:
    """Path of a raw file. The project's own samples (``strict=False``) have names of their own
    (``SAMPLE_NAMES``) so no file in the repository can be mistaken for an upstream file."""
    return folder / (fname if strict else SAMPLE_NAMES[fname])


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:  # truncated or not JSON at all
        raise _fail(
            path, "valid JSON", "a JSON object", f"a parse error ({exc})", "The file is damaged."
        ) from None


def _build_clinc150(folder: Path, strict: bool) -> DatasetDict:
    """Parse ``data_full.json`` (rows ``[text, intent]``) and ``domains.json`` (domain -> intents)."""
    full, domains_file = (
        _raw(folder, "data_full.json", strict),
        _raw(folder, "domains.json", strict),
    )
    rows, domains = _read_json(full), _read_json(domains_file)
    domain_of = {intent: dom for dom, intents in domains.items() for intent in intents}
    intents = sorted({intent for _, intent in rows["train"]})
    if sorted(domain_of) != intents or (strict and (len(intents), len(domains)) != (150, 10)):
        raise _fail(
            domains_file,
            "intents",
            "the 150 intents of data_full.json in 10 domains",
            f"{len(domain_of)} intents in {len(domains)} domains",
            "Replace domains.json.",
        )
    features = Features(
        {
            "text": Value("string"),
            "intent": ClassLabel(names=[*intents, OOS]),
            "domain": ClassLabel(names=[*sorted(domains), OOS]),
            "in_scope": Value("bool"),
        }
    )
    expected = {"train": (15000, 100), "validation": (3000, 100), "test": (4500, 1000)}
    splits = {}
    for split, key in [("train", "train"), ("validation", "val"), ("test", "test")]:
        in_scope, oos = rows[key], rows[f"oos_{key}"]
        _check_count(full, f"{key} rows", expected[split][0], len(in_scope), strict)
        _check_count(full, f"oos_{key} rows", expected[split][1], len(oos), strict)
        # Rows keep the file's order: in-scope first, then out-of-scope.
        pairs = [(t, i) for t, i in in_scope] + [(t, OOS) for t, _ in oos]
        splits[split] = Dataset.from_dict(
            {
                "text": [t for t, _ in pairs],
                "intent": [i for _, i in pairs],
                "domain": [domain_of.get(i, OOS) for _, i in pairs],
                "in_scope": [i != OOS for _, i in pairs],
            },
            features=features,
        )
    return DatasetDict(splits)


def _build_ud_ewt(folder: Path, strict: bool) -> DatasetDict:
    """Parse the three CoNLL-U files, keeping integer-id words (no multi-word ranges, no empty nodes)."""
    import conllu  # only this loader needs it

    tag_id = {tag: i for i, tag in enumerate(UPOS_TAGS)}
    features = Features(
        {
            "sent_id": Value("string"),
            "text": Value("string"),
            "tokens": List(Value("string")),
            "upos": List(ClassLabel(names=UPOS_TAGS)),
        }
    )
    expected = {"train": (12544, 204577), "validation": (2001, 25147), "test": (2077, 25094)}
    splits = {}
    for split, stem in [("train", "train"), ("validation", "dev"), ("test", "test")]:
        path = _raw(folder, f"en_ewt-ud-{stem}.conllu", strict)
        columns: dict[str, list] = {"sent_id": [], "text": [], "tokens": [], "upos": []}
        with open(path, encoding="utf-8") as f:
            for sentence in conllu.parse_incr(f):
                words = [w for w in sentence if isinstance(w["id"], int)]
                unknown = {w["upos"] for w in words} - tag_id.keys()
                if unknown:
                    raise _fail(
                        path, "UPOS tags", UPOS_TAGS, sorted(unknown), "The file is damaged."
                    )
                tokens = [w["form"] for w in words]
                columns["sent_id"].append(sentence.metadata.get("sent_id", ""))
                columns["text"].append(sentence.metadata.get("text", " ".join(tokens)))
                columns["tokens"].append(tokens)
                columns["upos"].append([tag_id[w["upos"]] for w in words])
        n_sent, n_tok = expected[split]
        _check_count(path, "sentences", n_sent, len(columns["tokens"]), strict)
        _check_count(path, "tokens", n_tok, sum(map(len, columns["tokens"])), strict)
        splits[split] = Dataset.from_dict(columns, features=features)
    return DatasetDict(splits)


SPECS: dict[str, _Spec] = {
    "sst2": _Spec(
        name="sst2",
        title="SST-2",
        folder="sst2",
        files={
            "train.tsv": (
                3738731,
                "c75796b01672b41c38cd4b35f4ff1ade88ca79b7577f3926e01ff69739d85ec9",
            ),
            "dev.tsv": (94415, "f7271f7a919ea884ca8563e13ed03028aa44296d1f738c003af3142b9a2188f8"),
        },
        base_url=None,
        build=_build_sst2,
        splits=("train", "validation"),
    ),
    "clinc150": _Spec(
        name="clinc150",
        title="CLINC150",
        folder="clinc150",
        files={
            "data_full.json": (
                2495390,
                "36923c3705a59e08fe9c3883d8bc2dd966ef93e22cb78ac41171782a698d56e0",
            ),
            "domains.json": (
                3818,
                "b947b579d3b8e74b06f93b01083d8efaff2888b43a3e362533bd88a6e1211b3a",
            ),
        },
        base_url=_CLINC_URL,
        build=_build_clinc150,
    ),
    "ud_ewt": _Spec(
        name="ud_ewt",
        title="UD English-EWT",
        folder="ud_english_ewt",
        files={
            "en_ewt-ud-train.conllu": (
                14203025,
                "3fb78e2b55482c8ee00caa653af436c88c9e5bc9a73ce26e4ae3ddc79d2b7e7b",
            ),
            "en_ewt-ud-dev.conllu": (
                1805545,
                "531a54ff90d6ab12201c5a50c3e78e6ddac4de69abc4bce5d275d3cd29efe2b6",
            ),
            "en_ewt-ud-test.conllu": (
                1804515,
                "e266e515a0a7547657ed3d90d9ba46487d6bd251f27ad4269d4e8a427c8555cd",
            ),
        },
        base_url=_EWT_URL,
        build=_build_ud_ewt,
    ),
}


# ------------------------------------------------------------------ step 1: prepared copy


def _prepared_dir(spec: _Spec) -> Path:
    return data_dir() / "prepared" / spec.name


def _file_table(folder: Path) -> dict[str, list]:
    return {
        p.relative_to(folder).as_posix(): [p.stat().st_size, _sha256(p)]
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }


def _prepared_problem(folder: Path, spec: _Spec) -> str | None:
    """Why the prepared copy can't be trusted, or None when every file matches its manifest."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "no readable manifest"
    if manifest.get("format") != PREPARED_FORMAT or manifest.get("name") != spec.name:
        return "made by another version of course.data"
    for rel, (size, sha) in manifest.get("files", {}).items():
        path = folder / rel
        if not path.is_file():
            return f"{rel} is missing"
        if path.stat().st_size != size or _sha256(path) != sha:
            return f"{rel} does not match its checksum"
    return None


def _load_prepared(spec: _Spec) -> tuple[DatasetDict, str] | None:
    folder = _prepared_dir(spec)
    if not folder.exists():
        return None
    problem = _prepared_problem(folder, spec)
    if problem is None:
        try:
            dsd = load_from_disk(str(folder))
            manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
            if {s: len(d) for s, d in dsd.items()} == manifest["sizes"]:
                source = _shown_source(manifest["source"])
                return dsd, f"prepared copy {_shown(folder)} (from {source})"
            problem = "split sizes differ from its manifest"
        except Exception as exc:  # a copy that passes the checksums but won't load
            problem = f"unreadable ({type(exc).__name__})"
    _note(
        f"{spec.title}: the prepared copy in {folder} is damaged ({problem}); preparing it again."
    )
    shutil.rmtree(folder, ignore_errors=True)
    return None


def _save_prepared(spec: _Spec, dsd: DatasetDict, source: str) -> DatasetDict:
    """Write a prepared copy atomically (temp folder + rename) and return it memory-mapped."""
    root = data_dir() / "prepared"
    try:
        root.mkdir(parents=True, exist_ok=True)
        for stale in root.glob(f".{spec.name}-*"):  # left by a killed run (an hour is plenty)
            if time.time() - stale.stat().st_mtime > 3600:
                shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{spec.name}-", dir=root))
        tmp.chmod(0o755)  # mkdtemp makes it private; a prepared copy is ordinary data
    except OSError as exc:
        _note(
            f"{spec.title}: could not save a prepared copy under {root} ({exc}); using it in memory."
        )
        return dsd
    try:
        with _quiet_datasets():
            dsd.save_to_disk(str(tmp))
        manifest = {
            "format": PREPARED_FORMAT,
            "name": spec.name,
            "source": source,
            "sizes": {s: len(d) for s, d in dsd.items()},
            "files": _file_table(tmp),
        }
        # The manifest is written last: a copy without one is never trusted.
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        final = _prepared_dir(spec)
        shutil.rmtree(final, ignore_errors=True)
        try:
            os.replace(tmp, final)
        except OSError:  # another process prepared it at the same moment: use theirs
            if _prepared_problem(final, spec) is not None:
                raise
        return load_from_disk(str(final))
    except OSError as exc:
        _note(f"{spec.title}: could not save a prepared copy ({exc}); using it in memory.")
        return dsd
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------------ step 2: mirror


def _mirror_root() -> Path | None:
    raw = os.environ.get("COURSE_DATA_MIRROR", "").strip()
    if not raw:
        return None
    root = Path(raw).expanduser()
    # A relative path is tried from the working directory, then from the repository root
    # (notebooks run in notebooks/, while the docs give paths relative to the repo).
    if not root.is_absolute() and not root.exists() and (REPO_ROOT / root).exists():
        root = REPO_ROOT / root
    return root.resolve() if root.exists() else root


def _from_mirror(spec: _Spec) -> tuple[DatasetDict, str] | None:
    root = _mirror_root()
    if root is None:
        return None
    folder = root / spec.folder
    if not folder.is_dir():
        _note(f"{spec.title}: COURSE_DATA_MIRROR={root} has no {spec.folder}/ folder; skipping it.")
        return None
    fix = (
        "The mirror is damaged: restore this file from the pinned upstream source "
        "(see data/README.md), or unset COURSE_DATA_MIRROR to download the data instead."
    )
    _verify_checksums(spec, folder, fix)
    try:
        dsd = spec.build(folder, True)
    except DataError as exc:
        raise DataError(f"{exc} {fix}") from None
    return dsd, f"mirror {_shown(folder)}"


# ---------------------------------------------------------------------- step 3: download


def _open_url(url: str, timeout: float = 30):
    """The one place that touches the network (tests replace it)."""
    return urllib.request.urlopen(url, timeout=timeout)


def _download(url: str, dest: Path, expected: tuple[int, str] | None) -> None:
    """Stream ``url`` into a temp file beside ``dest``, verify it, then rename it into place."""
    from tqdm.auto import tqdm

    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}-", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        digest, size = hashlib.sha256(), 0
        try:
            with os.fdopen(fd, "wb") as out, _open_url(url) as response:
                total = int(response.headers.get("Content-Length") or 0) or None
                with tqdm(
                    total=total, unit="B", unit_scale=True, desc=dest.name, leave=False
                ) as bar:
                    while chunk := response.read(1 << 16):
                        out.write(chunk)
                        digest.update(chunk)
                        size += len(chunk)
                        bar.update(len(chunk))
        except Exception as exc:  # urllib/http/socket errors of every kind
            raise _NetworkError(f"{url}: {type(exc).__name__}: {exc}") from None
        if total is not None and size != total:
            raise _NetworkError(f"{url}: connection cut after {size} of {total} bytes")
        if expected is not None and (size, digest.hexdigest()) != expected:
            raise _fail(
                dest,
                "downloaded size and sha256",
                expected,
                (size, digest.hexdigest()),
                "The upstream file changed or was altered in transit; please report it.",
            )
        tmp.chmod(0o644)  # mkstemp makes it private
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def _fetch_sst2(folder: Path) -> None:
    """GLUE ships SST-2 as a zip: fetch it, then extract the two tsv files atomically."""
    archive = folder / "SST-2.zip"
    _download(_SST2_ZIP_URL, archive, None)
    try:
        with zipfile.ZipFile(archive) as zf:
            for fname in ("train.tsv", "dev.tsv"):
                fd, tmp_name = tempfile.mkstemp(prefix=f".{fname}-", suffix=".part", dir=folder)
                with os.fdopen(fd, "wb") as out, zf.open(f"SST-2/{fname}") as member:
                    shutil.copyfileobj(member, out)
                os.chmod(tmp_name, 0o644)
                os.replace(tmp_name, folder / fname)
    except (zipfile.BadZipFile, KeyError) as exc:
        raise _fail(
            archive,
            "a GLUE SST-2 zip",
            "SST-2/train.tsv and SST-2/dev.tsv",
            exc,
            "Delete it and try again.",
        ) from None
    finally:
        archive.unlink(missing_ok=True)
        for part in folder.glob(".*.part"):
            part.unlink(missing_ok=True)


def _from_downloads(spec: _Spec) -> tuple[DatasetDict, str] | None:
    folder = data_dir() / "downloads" / spec.folder
    fix = "Delete it; the next load downloads it again."
    if all((folder / f).is_file() for f in spec.files):
        try:
            _verify_checksums(spec, folder, fix)
            return spec.build(folder, True), f"download {_shown(folder)}"
        except DataError as exc:  # our own cache: refetch rather than stop
            _note(f"{spec.title}: the earlier download is damaged ({exc}); fetching it again.")
            for f in spec.files:
                (folder / f).unlink(missing_ok=True)
    if offline():
        _note(f"{spec.title}: offline (COURSE_OFFLINE / HF_HUB_OFFLINE set): not downloading.")
        return None
    _note(f"{spec.title}: downloading from the pinned upstream into {_shown(folder)} ...")
    try:
        if spec.base_url is None:
            _fetch_sst2(folder)
        else:
            for fname, expected in spec.files.items():
                _download(spec.base_url + fname, folder / fname, expected)
    except _NetworkError as exc:
        _note(f"{spec.title}: download failed ({exc}).")
        return None
    try:  # SST-2's files come out of a zip and were not checked on the way in
        _verify_checksums(spec, folder, "The upstream file changed or was altered in transit.")
    except DataError:
        for f in spec.files:
            (folder / f).unlink(missing_ok=True)
        raise
    return spec.build(folder, True), f"download {_shown(folder)}"


# ----------------------------------------------------------------------- step 4: samples


def _from_samples(spec: _Spec) -> tuple[DatasetDict, str]:
    folder = SAMPLES_DIR / spec.folder
    if not folder.is_dir():
        raise DataError(
            f"{spec.title}: no data at all: no prepared copy, no mirror, no network, and no "
            f"samples in {folder}. Run `make data` or set COURSE_DATA_MIRROR."
        )
    message = (
        f"{spec.title}: {SAMPLE_DATA_MARKER} in {_shown(folder)} (no prepared copy, no "
        "COURSE_DATA_MIRROR, no download): results won't be meaningful. Get the real data "
        "with `make data` (online) or set COURSE_DATA_MIRROR to a mirror folder."
    )
    warnings.warn(message, SampleDataWarning, stacklevel=5)
    _note("WARNING: " + message)
    return spec.build(folder, False), f"SAMPLES {_shown(folder)}"


# ----------------------------------------------------------------------------- loaders


def _resolve(spec: _Spec, allow_samples: bool = True) -> tuple[DatasetDict, str]:
    """Walk the resolution order; returns the dataset and a description of its source."""
    found = _load_prepared(spec)
    if found is not None:
        return found
    for step in (_from_mirror, _from_downloads):
        found = step(spec)
        if found is not None:
            dsd, source = found
            dsd = _save_prepared(spec, dsd, source)
            return dsd, f"{source} (prepared copy saved in {_shown(_prepared_dir(spec))})"
    if not allow_samples:
        raise DataError(
            f"{spec.title}: no source reachable (no COURSE_DATA_MIRROR, no network or offline "
            "mode set). Set COURSE_DATA_MIRROR to a mirror folder, or run this online."
        )
    return _from_samples(spec)


def _load(name: str) -> DatasetDict:
    spec = SPECS[name]
    dsd, source = _resolve(spec)
    sizes = ", ".join(f"{split} {len(dsd[split])}" for split in spec.splits)
    print(f"{spec.title} from {source}: {sizes}")
    return dsd


def load_sst2() -> DatasetDict:
    """SST-2 (GLUE): ``train`` / ``validation``; ``sentence`` (str), ``label`` (negative, positive)."""
    return _load("sst2")


def load_clinc150() -> DatasetDict:
    """CLINC150 "full": ``train`` / ``validation`` / ``test``, in-scope rows then out-of-scope rows.

    Columns: ``text`` (str), ``intent`` (ClassLabel: 150 intents sorted, then "oos" = 150),
    ``domain`` (ClassLabel: 10 domains sorted, then "oos"), ``in_scope`` (bool).
    """
    return _load("clinc150")


def load_ud_ewt() -> DatasetDict:
    """UD English-EWT r2.16: ``train`` / ``validation`` / ``test`` sentences.

    Columns: ``sent_id`` (str), ``text`` (str), ``tokens`` (list of str), ``upos`` (list of
    ClassLabel over :data:`UPOS_TAGS`). Multi-word token ranges and empty nodes are dropped.
    """
    return _load("ud_ewt")


def prepare(name: str, force: bool = False) -> str:
    """Make sure ``name`` has a valid prepared copy (never from the samples); returns its source."""
    spec = SPECS[name]
    if force:
        shutil.rmtree(_prepared_dir(spec), ignore_errors=True)
    _, source = _resolve(spec, allow_samples=False)
    return source


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course.data", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="prepare datasets under <data dir>/prepared")
    prep.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"datasets to prepare (default: all of {', '.join(SPECS)})",
    )
    prep.add_argument("--force", action="store_true", help="rebuild even a valid prepared copy")
    args = parser.parse_args(argv)
    if unknown := [n for n in args.names if n not in SPECS]:
        parser.error(f"unknown dataset {', '.join(unknown)} (choose from {', '.join(SPECS)})")
    failed = []
    for name in args.names or list(SPECS):
        try:
            print(f"{SPECS[name].title}: ready, from {prepare(name, force=args.force)}")
        except DataError as exc:
            print(f"ERROR: {exc}", file=sys.stderr)
            failed.append(name)
    if failed:
        print(f"not prepared: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

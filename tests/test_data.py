"""Tests of course.data: real sizes from the mirror, verification, fallbacks, atomic downloads.

Every test runs offline with its own data dir (COURSE_DATA_DIR in tmp_path), so the real
data/prepared is never touched and nothing contacts the network (a guard fails any test
that tries). Tests marked ``needs_mirror`` read the real files from the dataset mirror named
by ``COURSE_DATA_MIRROR`` (layout in data/README.md) and are skipped without one.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import urllib.error
import warnings
import zipfile
from pathlib import Path

import pytest

from course import data

ROOT = Path(__file__).resolve().parents[1]
_MIRROR_ENV = os.environ.get("COURSE_DATA_MIRROR", "").strip()
MIRROR = (ROOT / Path(_MIRROR_ENV).expanduser()).resolve() if _MIRROR_ENV else ROOT / "no-mirror"
NO_MIRROR = "no dataset mirror: set COURSE_DATA_MIRROR to one (layout in data/README.md)"
needs_mirror = pytest.mark.skipif(not MIRROR.is_dir(), reason=NO_MIRROR)
LOADERS = {"sst2": data.load_sst2, "clinc150": data.load_clinc150, "ud_ewt": data.load_ud_ewt}


def _no_network(url: str, timeout: float = 30):
    raise AssertionError(f"a test tried to reach the network: {url}")


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    """Offline, no mirror, a private data dir, and a guard on the one network call."""
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("COURSE_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("COURSE_DATA_MIRROR", raising=False)
    monkeypatch.setattr(data, "_open_url", _no_network)
    return tmp_path / "data"


@pytest.fixture(scope="session")
def real(tmp_path_factory):
    """The three datasets loaded once from the mirror (prepared into a session data dir)."""
    if not MIRROR.is_dir():
        pytest.skip(NO_MIRROR)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COURSE_DATA_DIR", str(tmp_path_factory.mktemp("real")))
        mp.setenv("COURSE_DATA_MIRROR", str(MIRROR))
        mp.setenv("COURSE_OFFLINE", "1")
        mp.setattr(data, "_open_url", _no_network)
        return {name: load() for name, load in LOADERS.items()}


def _mirror_copy(tmp_path: Path, folder: str) -> Path:
    """A writable mirror holding only ``folder``, copied from the real mirror."""
    root = tmp_path / "mirror"
    shutil.copytree(MIRROR / folder, root / folder)
    return root


def _truncate(path: Path) -> None:
    path.chmod(0o644)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)


# --------------------------------------------------------------------------- real data


def test_sst2_real(real):
    sst2 = real["sst2"]
    assert {s: len(d) for s, d in sst2.items()} == {"train": 67349, "validation": 872}
    assert sst2["train"].features["label"].names == ["negative", "positive"]
    assert sum(sst2["validation"]["label"]) == 444
    assert any("'" in s for s in sst2["train"]["sentence"])  # quotes survive the parser


def test_clinc150_real(real):
    clinc = real["clinc150"]
    assert {s: len(d) for s, d in clinc.items()} == {
        "train": 15100,
        "validation": 3100,
        "test": 5500,
    }
    intents = clinc["train"].features["intent"].names
    domains = clinc["train"].features["domain"].names
    assert len(intents) == 151 and intents[-1] == "oos" and intents[:-1] == sorted(intents[:-1])
    assert len(domains) == 11 and domains[-1] == "oos"
    for split, n_oos in [("train", 100), ("validation", 100), ("test", 1000)]:
        ds = clinc[split]
        assert ds["in_scope"].count(False) == n_oos
        assert all((i == 150) == (not s) for i, s in zip(ds["intent"], ds["in_scope"], strict=True))
        assert all((d == 10) == (not s) for d, s in zip(ds["domain"], ds["in_scope"], strict=True))


def test_ud_ewt_real(real):
    ewt = real["ud_ewt"]
    assert {s: len(d) for s, d in ewt.items()} == {"train": 12544, "validation": 2001, "test": 2077}
    tokens = {s: sum(map(len, d["tokens"])) for s, d in ewt.items()}
    assert tokens == {"train": 204577, "validation": 25147, "test": 25094}
    assert ewt["train"].features["upos"].feature.names == data.UPOS_TAGS
    assert len(data.UPOS_TAGS) == 17
    assert {t for tags in ewt["train"]["upos"] for t in tags} == set(range(17))
    first = ewt["validation"][0]
    assert len(first["tokens"]) == len(first["upos"]) and first["sent_id"] and first["text"]


@pytest.mark.parametrize("name", LOADERS)
def test_samples_have_the_real_features(real, name, recwarn):
    sample = LOADERS[name]()  # offline, no mirror: samples
    assert list(sample) == list(real[name])
    for split in sample:
        assert sample[split].features == real[name][split].features
        assert len(sample[split]) > 0
    assert any(issubclass(w.category, data.SampleDataWarning) for w in recwarn)


# ------------------------------------------------------------------------- resolution


@needs_mirror
def test_source_lines_show_no_absolute_path(monkeypatch, capsys, tmp_path):
    """Stored notebook outputs must not show this machine's paths: the one-line source names
    the mirror as $COURSE_DATA_MIRROR and a data dir outside the repo as $COURSE_DATA_DIR."""
    mirror = _mirror_copy(tmp_path, "sst2")
    monkeypatch.setenv("COURSE_DATA_MIRROR", str(mirror))
    data.load_sst2()
    data.load_sst2()
    first, second = capsys.readouterr().out.splitlines()
    assert first.startswith(
        "SST-2 from mirror $COURSE_DATA_MIRROR/sst2 "
        "(prepared copy saved in $COURSE_DATA_DIR/prepared/sst2): train 67349"
    )
    assert second.startswith(
        "SST-2 from prepared copy $COURSE_DATA_DIR/prepared/sst2 "
        "(from mirror $COURSE_DATA_MIRROR/sst2): train 67349"
    )
    assert str(tmp_path) not in first + second


def test_paths_inside_the_repository_are_shown_relative(monkeypatch, capsys):
    monkeypatch.setenv("COURSE_DATA_MIRROR", str(ROOT / "data" / "samples"))
    assert data._shown(ROOT / "data" / "prepared" / "sst2") == "data/prepared/sst2"
    assert data._shown(ROOT / "data" / "samples" / "sst2") == "$COURSE_DATA_MIRROR/sst2"
    # a manifest written before this change holds the absolute path of its source
    old = f"mirror {ROOT / 'data' / 'samples' / 'sst2'}"
    assert data._shown_source(old) == "mirror $COURSE_DATA_MIRROR/sst2"
    monkeypatch.delenv("COURSE_DATA_MIRROR")
    with pytest.warns(data.SampleDataWarning):
        data.load_sst2()
    assert "SST-2 from SAMPLES data/samples/sst2: train" in capsys.readouterr().out


@needs_mirror
def test_prepared_copy_is_used_next_time(monkeypatch, capsys):
    monkeypatch.setenv("COURSE_DATA_MIRROR", str(MIRROR))
    data.load_sst2()
    assert "SST-2 from mirror" in capsys.readouterr().out
    monkeypatch.delenv("COURSE_DATA_MIRROR")  # the prepared copy alone is enough now
    with warnings.catch_warnings():
        warnings.simplefilter("error", data.SampleDataWarning)
        sst2 = data.load_sst2()
    assert "SST-2 from prepared copy" in capsys.readouterr().out
    assert len(sst2["train"]) == 67349


@needs_mirror
@pytest.mark.parametrize("damage", ["truncate", "no_manifest"])
def test_damaged_prepared_copy_is_rebuilt(monkeypatch, capsys, isolated, damage):
    monkeypatch.setenv("COURSE_DATA_MIRROR", str(MIRROR))
    data.load_sst2()
    prepared = isolated / "prepared" / "sst2"
    if damage == "truncate":
        _truncate(next(prepared.glob("train/*.arrow")))
    else:
        (prepared / data.MANIFEST).unlink()
    capsys.readouterr()
    sst2 = data.load_sst2()
    out, err = capsys.readouterr()
    assert "damaged" in err and "SST-2 from mirror" in out
    assert len(sst2["train"]) == 67349
    assert data._prepared_problem(prepared, data.SPECS["sst2"]) is None


@needs_mirror
@pytest.mark.parametrize(
    "name, folder, fname",
    [
        ("sst2", "sst2", "dev.tsv"),
        ("clinc150", "clinc150", "data_full.json"),
        ("clinc150", "clinc150", "domains.json"),
        ("ud_ewt", "ud_english_ewt", "en_ewt-ud-dev.conllu"),
    ],
)
def test_truncated_mirror_file_is_rejected(monkeypatch, tmp_path, name, folder, fname):
    mirror = _mirror_copy(tmp_path, folder)
    _truncate(mirror / folder / fname)
    monkeypatch.setenv("COURSE_DATA_MIRROR", str(mirror))
    with pytest.raises(data.DataError, match=fname) as info:
        LOADERS[name]()
    assert "expected" in str(info.value) and "COURSE_DATA_MIRROR" in str(info.value)
    assert str(mirror / folder / fname) in str(info.value)  # the full path, to find the file


def _edit_one_byte(path: Path) -> None:
    """Change one letter in the middle of the file: same size, same rows, another sha256."""
    path.chmod(0o644)
    raw = bytearray(path.read_bytes())
    middle = len(raw) // 2
    at = middle + next(i for i, b in enumerate(raw[middle:]) if chr(b).isalpha())
    raw[at] = ord("x") if raw[at] != ord("x") else ord("y")
    path.write_bytes(bytes(raw))


EVERY_FILE = [(name, spec.folder, f) for name, spec in data.SPECS.items() for f in spec.files]


@needs_mirror
@pytest.mark.parametrize("name, folder, fname", EVERY_FILE)
def test_edited_mirror_file_is_rejected(monkeypatch, tmp_path, name, folder, fname):
    """An edited sentence keeps the row and label counts: only the sha256 catches it."""
    mirror = _mirror_copy(tmp_path, folder)
    _edit_one_byte(mirror / folder / fname)
    monkeypatch.setenv("COURSE_DATA_MIRROR", str(mirror))
    with pytest.raises(data.DataError, match="sha256") as info:
        LOADERS[name]()
    assert fname in str(info.value) and "COURSE_DATA_MIRROR" in str(info.value)


def test_every_dataset_file_has_a_checksum():
    for spec in data.SPECS.values():
        for fname, (size, sha) in spec.files.items():
            assert size > 0 and re.fullmatch("[0-9a-f]{64}", sha), (spec.name, fname)


def test_data_readme_publishes_the_checksums_of_the_code():
    """data/README.md and course.data hold the same size and sha256 for every file."""
    readme = (ROOT / "data" / "README.md").read_text(encoding="utf-8")
    entry = re.compile(r"`([\w.-]+)`\s+([\d,]+) bytes,\s+sha256\s+`([0-9a-f]{64})`")
    published = {f: (int(size.replace(",", "")), sha) for f, size, sha in entry.findall(readme)}
    in_code = {f: expected for spec in data.SPECS.values() for f, expected in spec.files.items()}
    assert published == in_code


@needs_mirror
def test_mirror_without_the_dataset_is_skipped(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("COURSE_DATA_MIRROR", str(_mirror_copy(tmp_path, "sst2")))
    with pytest.warns(data.SampleDataWarning):
        data.load_clinc150()
    assert "has no clinc150/ folder" in capsys.readouterr().err


def test_samples_only_when_nothing_real(capsys):
    with pytest.warns(data.SampleDataWarning, match="won't be meaningful"):
        sst2 = data.load_sst2()
    out, err = capsys.readouterr()
    assert "SST-2 from SAMPLES" in out and "make data" in err
    assert data.SAMPLE_DATA_MARKER in err  # what `make check` and `make solutions` look for
    assert set(sst2["train"]["label"]) == {0, 1}


@needs_mirror
def test_no_sample_warning_with_a_mirror(monkeypatch):
    monkeypatch.setenv("COURSE_DATA_MIRROR", str(MIRROR))
    with warnings.catch_warnings():
        warnings.simplefilter("error", data.SampleDataWarning)
        data.load_clinc150()


@needs_mirror
def test_existing_downloads_are_used_offline(isolated, capsys):
    downloads = isolated / "downloads" / "clinc150"
    downloads.mkdir(parents=True)
    for fname in data.SPECS["clinc150"].files:
        shutil.copy(MIRROR / "clinc150" / fname, downloads / fname)
    clinc = data.load_clinc150()
    assert "CLINC150 from download" in capsys.readouterr().out
    assert len(clinc["test"]) == 5500


def test_cli_prepare_fails_without_a_source(capsys):
    assert data.main(["prepare", "sst2"]) == 1
    assert "no source reachable" in capsys.readouterr().err


@needs_mirror
def test_cli_prepare(monkeypatch, isolated, capsys):
    monkeypatch.setenv("COURSE_DATA_MIRROR", str(MIRROR))
    assert data.main(["prepare", "sst2", "clinc150"]) == 0
    assert (isolated / "prepared" / "clinc150" / data.MANIFEST).is_file()
    assert "CLINC150: ready" in capsys.readouterr().out


# -------------------------------------------------------------------------- downloads


class FakeResponse:
    """Stands in for urlopen's response: serves ``payload``, optionally dying part-way."""

    def __init__(self, payload: bytes, length: int | None = None, die_after: int | None = None):
        self.payload, self.pos, self.die_after = payload, 0, die_after
        self.headers = {"Content-Length": str(len(payload) if length is None else length)}

    def read(self, n: int) -> bytes:
        if self.die_after is not None and self.pos >= self.die_after:
            raise ConnectionResetError("connection reset by peer")
        chunk = self.payload[self.pos : self.pos + n]
        self.pos += len(chunk)
        return chunk

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture
def online(monkeypatch):
    """Lift the offline flags; each test supplies its own fake _open_url."""
    monkeypatch.delenv("COURSE_OFFLINE")
    monkeypatch.delenv("HF_HUB_OFFLINE")


def _files_left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def test_failing_download_falls_through(online, monkeypatch, capsys, isolated):
    def unreachable(url, timeout=30):
        raise urllib.error.URLError("Temporary failure in name resolution")

    monkeypatch.setattr(data, "_open_url", unreachable)
    with pytest.warns(data.SampleDataWarning):
        data.load_clinc150()
    err = capsys.readouterr().err
    assert "download failed" in err and "Traceback" not in err
    assert _files_left(isolated / "downloads") == []


@pytest.mark.parametrize("how", ["reset", "short"])
def test_interrupted_download_leaves_no_file(online, monkeypatch, capsys, isolated, how):
    payload = b"x" * 300_000
    if how == "reset":
        response = FakeResponse(payload, die_after=100_000)
    else:  # the server closes early: fewer bytes than announced
        response = FakeResponse(payload[:100_000], length=len(payload))
    monkeypatch.setattr(data, "_open_url", lambda url, timeout=30: response)
    with pytest.warns(data.SampleDataWarning):
        data.load_ud_ewt()
    assert "download failed" in capsys.readouterr().err
    assert _files_left(isolated / "downloads") == []


@needs_mirror
def test_download_is_verified_and_prepared(online, monkeypatch, capsys, isolated):
    served = []

    def serve_mirror(url, timeout=30):
        served.append(url)
        assert url.startswith(data._CLINC_URL)
        return FakeResponse((MIRROR / "clinc150" / url.rsplit("/", 1)[1]).read_bytes())

    monkeypatch.setattr(data, "_open_url", serve_mirror)
    clinc = data.load_clinc150()
    assert len(served) == 2 and len(clinc["train"]) == 15100
    assert "CLINC150 from download" in capsys.readouterr().out
    assert _files_left(isolated / "downloads") == ["data_full.json", "domains.json"]


def test_download_with_a_wrong_checksum_is_an_error(online, monkeypatch, isolated):
    size = data.SPECS["clinc150"].files["data_full.json"][0]
    monkeypatch.setattr(data, "_open_url", lambda url, timeout=30: FakeResponse(b"{" * size))
    with pytest.raises(data.DataError, match="sha256"):
        data.load_clinc150()
    assert _files_left(isolated / "downloads") == []


@needs_mirror
def test_sst2_zip_download_is_extracted(online, monkeypatch, capsys, isolated):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:  # GLUE's layout: SST-2/train.tsv, SST-2/dev.tsv
        for fname in ("train.tsv", "dev.tsv"):
            zf.write(MIRROR / "sst2" / fname, f"SST-2/{fname}")
    monkeypatch.setattr(data, "_open_url", lambda url, timeout=30: FakeResponse(buffer.getvalue()))
    sst2 = data.load_sst2()
    assert "SST-2 from download" in capsys.readouterr().out
    assert len(sst2["train"]) == 67349
    assert _files_left(isolated / "downloads") == ["dev.tsv", "train.tsv"]


@needs_mirror
def test_sst2_zip_with_an_edited_file_is_an_error(online, monkeypatch, isolated):
    """GLUE's zip has no published checksum: the extracted files are checked, and removed."""
    edited = isolated.parent / "edited_dev.tsv"
    shutil.copy(MIRROR / "sst2" / "dev.tsv", edited)
    _edit_one_byte(edited)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.write(MIRROR / "sst2" / "train.tsv", "SST-2/train.tsv")
        zf.write(edited, "SST-2/dev.tsv")
    monkeypatch.setattr(data, "_open_url", lambda url, timeout=30: FakeResponse(buffer.getvalue()))
    with pytest.raises(data.DataError, match="dev.tsv: sha256"):
        data.load_sst2()
    assert _files_left(isolated / "downloads") == []


def test_sample_file_names_agree_with_the_sample_writer_and_are_our_own():
    """data/samples/make_samples.py and course.data use the same names, none an upstream one."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "make_samples", data.SAMPLES_DIR / "make_samples.py"
    )
    writer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(writer)
    assert writer.SAMPLE_NAMES == data.SAMPLE_NAMES
    upstream = {f for s in data.SPECS.values() for f in s.files}
    assert set(data.SAMPLE_NAMES) == upstream
    assert not set(data.SAMPLE_NAMES.values()) & upstream

"""The class report (``make report``): what a graded class got wrong, by named mistake.

Most tests build a graded OUT directly: rows as the trusted replay decides them (probe records
of known answers replayed by the grader's checks, in this process), written as ``make grade``
writes them. One ``slow`` test grades a small class end to end, a hostile hand-in among it. The
browser test opens the page in headless Chromium when it is installed (``make check-site``'s
browser: apt-get install chromium chromium-driver).
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import random
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

import nbformat
import pytest

from course.framework.contract import ERROR, FAILED, MISSING, NOT_IMPLEMENTED, PASSED, TIMEOUT
from course.grading import output, report
from course.grading.names import FORMULA_START, NUMBER
from course.grading.verdict import ExerciseResult

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "report"


def _write_out(out: Path, graded: dict[str, list[ExerciseResult]]) -> Path:
    """OUT as ``make grade`` writes it: the records and a manifest (what the report reads)."""
    files = {report.RECORDS: report.records_json(graded.items()), "grades.csv": "student\n"}
    output.write_tree(out, files)
    return out


def _row(exercise: str, status: str, mistake: str | None = None, prop: str | None = None):
    notebook = f"{exercise.split('.')[0].zfill(2)}_synthetic.ipynb"
    return ExerciseResult(notebook, exercise, "check", status, "", mistake=mistake, prop=prop)


def _csv_rows(out: Path) -> list[dict]:
    with open(out / report.CSV_NAME, newline="", encoding="utf-8") as file:
        return list(csv.DictReader(file))


def _counts(out: Path) -> Counter:
    """``(exercise, kind, name) -> count`` of report.csv's mistake and property rows."""
    return Counter(
        {
            (r["exercise"], r["kind"], r["name"]): int(r["count"])
            for r in _csv_rows(out)
            if r["kind"] not in ("exercise", report.SEEN)
        }
    )


# --- counting, from records written directly ---------------------------------------------------


def test_each_failed_answer_counts_once_under_its_mistake_else_its_property(tmp_path):
    graded = {
        "ann": [
            _row("1.1", FAILED, "a mask inverted", "blocked keys get weight 0"),
            _row("1.2", PASSED),
        ],
        "bo": [
            _row("1.1", FAILED, "a mask inverted", "blocked keys get weight 0"),
            _row("1.2", FAILED, None, "the stated dtype"),
        ],
        "cy": [_row("1.1", TIMEOUT), _row("1.2", NOT_IMPLEMENTED)],
        "di": [_row("1.1", PASSED), _row("1.2", MISSING)],
    }
    out = _write_out(tmp_path / "out", graded)
    page, table, others = report.make_report(out)
    assert others == []
    assert _counts(out) == {
        ("1.1", "mistake", "a mask inverted"): 2,
        ("1.1", "unnamed", ""): 1,  # the timeout: failed, with nothing named
        ("1.2", "property", "the stated dtype"): 1,
    }
    rows = {r["exercise"]: r for r in _csv_rows(out) if r["kind"] == "exercise"}
    assert [rows["1.1"][k] for k in ("passed", "failed", "not started")] == ["1", "3", "0"]
    assert [rows["1.2"][k] for k in ("passed", "failed", "not started")] == ["1", "1", "2"]
    mistake = next(r for r in _csv_rows(out) if r["kind"] == "mistake")
    assert mistake["sentence of the text"] == "blocked keys get weight 0"
    text = page.read_text(encoding="utf-8")
    assert "a mask inverted" in text and "blocked keys get weight 0" in text
    assert "the stated dtype" in text
    # The report joined the manifest: `make grade`'s verify still finds OUT as written.
    assert output.verify(out) == []


def test_students_are_numbered_unless_names_are_asked(tmp_path):
    graded = {
        "Zoë <b>Smith</b>": [_row("0.1", PASSED)],
        "ann": [_row("0.1", FAILED)],
        "bo": [_row("0.1", NOT_IMPLEMENTED)],
    }
    out = _write_out(tmp_path / "out", graded)
    page = report.make_report(out)[0].read_text(encoding="utf-8")
    for name in ("Zoë", "Smith", "ann<", ">ann", "bo<"):
        assert name not in page
    assert all(f"student {i}" in page for i in (1, 2, 3))
    again = report.make_report(out)[0].read_text(encoding="utf-8")
    assert again == page  # a stable order: the same page twice
    named = report.make_report(out, names=True)[0].read_text(encoding="utf-8")
    assert "Zoë &lt;b&gt;Smith&lt;/b&gt;" in named and "<b>Smith" not in named
    assert "student 1" not in named


def test_csv_quotes_every_text_cell_and_no_cell_starts_a_formula(tmp_path):
    hostile = '=HYPERLINK("http://x";"y"),;@SUM(1)'
    graded = {"ann": [_row("0.1", FAILED, hostile, "+1; -2, =3")], "bo": [_row("0.1", FAILED)]}
    out = _write_out(tmp_path / "out", graded)
    report.make_report(out)
    raw = (out / report.CSV_NAME).read_text(encoding="utf-8")
    for separator in (",", ";"):  # Excel splits on ";" in most of Europe
        for row in csv.reader(io.StringIO(raw), delimiter=separator):
            for cell in row:
                assert not cell.startswith(FORMULA_START) or NUMBER.match(cell), (separator, cell)
    rows = list(csv.reader(io.StringIO(raw), quoting=csv.QUOTE_NONNUMERIC))
    assert all(isinstance(c, float) for c in rows[1][4:9])  # counts stay numbers
    neutralised = '\'=HYPERLINK("http://x";"y"),;\'@SUM(1)'  # each start after a separator too
    assert any(c == neutralised for r in rows for c in r)


def test_a_report_of_a_changed_record_is_refused(tmp_path):
    out = _write_out(tmp_path / "out", {"ann": [_row("0.1", FAILED, "m", "p")]})
    path = out / report.RECORDS
    path.write_text(path.read_text().replace('"m"', '"another"'), encoding="utf-8")
    with pytest.raises(report.ReportError, match="changed since the grader wrote it"):
        report.make_report(out)
    assert not (out / report.HTML_NAME).exists()


def test_an_edited_grades_csv_is_reported_and_left_out_of_the_manifest(tmp_path):
    out = _write_out(tmp_path / "out", {"ann": [_row("0.1", PASSED)]})
    (out / "grades.csv").write_text("student,0.1\nann,7\n", encoding="utf-8")
    others = report.make_report(out)[2]
    assert others == ["grades.csv: changed since the grader wrote it"]
    manifest = json.loads((out / output.MANIFEST).read_text(encoding="utf-8"))
    assert report.HTML_NAME not in manifest["files"]


@pytest.mark.parametrize(
    "files, said",
    [
        ({}, "has no records.json"),
        ({"submission_metadata.yml": "submission_1:\n"}, "Gradescope export"),
        ({"grades.csv": "First Name,Last Name,SID,Email,Total Score\n"}, "Gradescope export"),
    ],
)
def test_a_folder_that_is_no_graded_class_gets_a_message_that_says_what_to_do(
    tmp_path, files, said
):
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    with pytest.raises(report.ReportError, match=said) as error:
        report.make_report(tmp_path)
    assert "make grade" in str(error.value)
    assert report.main([str(tmp_path)]) == 2


def _noted(exercise: str, status: str, *notes: str) -> ExerciseResult:
    row = _row(exercise, status)
    row.notes = list(notes)
    return row


GRAD_OFF = "softmax: your code switched gradient tracking off and left it so."


def test_claims_seen_and_not_graded_are_listed_per_exercise_with_who(tmp_path):
    graded = {
        "ann": [_noted("0.1", PASSED, GRAD_OFF), _row("0.2", PASSED)],
        "bo": [_noted("0.1", FAILED, GRAD_OFF, "=1+1 changed x in place"), _row("0.2", FAILED)],
        "cy": [_row("0.1", PASSED), _row("0.2", PASSED)],
    }
    out = _write_out(tmp_path / "out", graded)
    recorded = json.loads((out / report.RECORDS).read_text(encoding="utf-8"))
    assert [r["notes"] for e in recorded["students"] for r in e["results"]] == [
        [GRAD_OFF], [], [GRAD_OFF, "=1+1 changed x in place"], [], [], []
    ]  # fmt: skip
    page = report.make_report(out)[0].read_text(encoding="utf-8")
    seen = {r["name"]: r for r in _csv_rows(out) if r["kind"] == report.SEEN}
    assert {n: (r["exercise"], r["count"], r["students"]) for n, r in seen.items()} == {
        GRAD_OFF: ("0.1", "2", "3"),
        "'=1+1 changed x in place": ("0.1", "1", "3"),  # a formula start neutralised
    }
    raw = (out / report.CSV_NAME).read_text(encoding="utf-8")
    assert {len(row) for row in csv.reader(io.StringIO(raw))} == {len(report.CSV_COLUMNS)}
    shown = report.labels(report.read_records(out), names=False)
    assert seen[GRAD_OFF]["students seen"] == "; ".join(sorted([shown["ann"], shown["bo"]]))
    assert seen["'=1+1 changed x in place"]["students seen"] == shown["bo"]
    assert GRAD_OFF in page and "2 of 3 students" in page
    assert ">ann" not in page and "bo<" not in page  # numbered unless names are asked
    named = report.make_report(out, names=True)[0].read_text(encoding="utf-8")
    assert "<td>ann, bo</td>" in named
    assert {r["students seen"] for r in _csv_rows(out) if r["kind"] == report.SEEN} == {
        "ann; bo",
        "bo",
    }


def test_a_class_without_claims_seen_has_none_listed_and_old_records_read(tmp_path):
    graded = {"ann": [_row("0.1", PASSED)], "bo": [_row("0.1", FAILED, "m", "p")]}
    old = json.loads(report.records_json(graded.items()))
    for entry in old["students"]:  # as written before notes were recorded
        for row in entry["results"]:
            del row["notes"]
    out = tmp_path / "out"
    output.write_tree(out, {report.RECORDS: json.dumps(old), "grades.csv": "student\n"})
    page = report.make_report(out)[0].read_text(encoding="utf-8")
    assert "Nothing was seen and left ungraded." in page
    assert not [r for r in _csv_rows(out) if r["kind"] == report.SEEN]
    assert _counts(out) == {("0.1", "mistake", "m"): 1}


def test_the_page_is_self_contained(tmp_path):
    graded = {"ann": [_row("0.1", FAILED, "m", "p")], "bo": [_row("0.1", NOT_IMPLEMENTED)]}
    page = report.make_report(_write_out(tmp_path / "out", graded))[0].read_text(encoding="utf-8")
    lowered = page.lower()
    assert "<script" not in lowered and "<link" not in lowered and "<img" not in lowered
    assert "src=" not in lowered and "url(" not in lowered and "@import" not in lowered
    assert lowered.count("<svg") == 3  # the heat map, the pass rates, the not started
    assert "prefers-color-scheme: dark" in page


def _synthetic_class(students: int, seed: int = 0) -> dict[str, list[ExerciseResult]]:
    """44 exercises in 11 notebooks, as many as the course has, for ``students`` complete or
    partial hand-ins."""
    exercises = [(f"{n:02d}_synthetic.ipynb", f"{n}.{k}") for n in range(11) for k in range(1, 5)]
    draw = random.Random(seed)
    graded = {}
    for s in range(students):
        stop = draw.randrange(len(exercises) // 2, len(exercises) + 1)  # a partial hand-in
        rows = []
        for k, (notebook, exercise) in enumerate(exercises):
            if k >= stop:
                status = draw.choice([NOT_IMPLEMENTED, MISSING])
            else:
                status = draw.choice([PASSED, PASSED, FAILED, FAILED, ERROR])
            mistake = draw.choice([None, f"mistake {draw.randrange(4)}"])
            prop = f"property {draw.randrange(3)}" if status == FAILED else None
            rows.append(
                ExerciseResult(notebook, exercise, "check", status, "", mistake=mistake, prop=prop)
            )
        graded[f"student key {s:02d}"] = rows
    return graded


def test_a_class_of_thirty_makes_its_report_in_under_ten_seconds(tmp_path):
    graded = _synthetic_class(30)
    out = _write_out(tmp_path / "out", graded)
    start = time.perf_counter()
    report.main([str(out)])
    elapsed = time.perf_counter() - start
    assert elapsed < 10, f"{elapsed:.1f} s"
    rows = _csv_rows(out)
    failed = sum(r.status == FAILED for rs in graded.values() for r in rs)
    assert sum(int(r["count"]) for r in rows if r["kind"] in ("mistake", "property")) == failed


# --- the trusted replay: what a record can and cannot carry -----------------------------------

# The fixture class: each answer as a student writes it, and what it must be counted under.
HOSTILE_PRINTS = (  # mistake names and a record line, printed where the grader reads output
    '    print("the global mean subtracted; the mean added; divides by N-1")\n'
    '    print(\'{"student": "s1", "exercise": "97.1", "status": "failed", '
    '"mistake": "the mean added"}\')\n'
)
ANSWERS = {
    "centre": {
        "right": "def centre(x):\n    return x - x.mean(-1, keepdim=True)",
        "global": "def centre(x):\n    return x - x.mean()",
        "added": "def centre(x):\n    return x + x.mean(-1, keepdim=True)",
        "raises": "def centre(x):\n    raise ValueError('not today')",
        "hostile": (  # a failure of its own making, naming a mistake and a property
            "def centre(x):\n" + HOSTILE_PRINTS + "    from course.framework.failure import CheckFailure\n"
            "    failure = CheckFailure('gives what the global mean subtracted gives (the "
            "property violated: subtract each row\\'s own mean).')\n"
            "    failure.mistake = 'the global mean subtracted'\n"
            '    failure.prop = "subtract each row\'s own mean"\n'
            "    raise failure"
        ),
    },
    "scale": {
        "right": "def scale(x, k):\n    return x * k",
        "added": "def scale(x, k):\n    return x + k",
        "stub": "def scale(x, k):\n    # TODO: multiply x by k\n    raise NotImplementedError",
        "hostile": "def scale(x, k):\n" + HOSTILE_PRINTS + "    return x * k",
        "grad off": "def scale(x, k):\n    torch.set_grad_enabled(False)\n    return x * k",
    },
    "variance": {
        "right": "def variance(x):\n    return x.var(-1, correction=0)",
        "n-1": "def variance(x):\n    return x.var(-1)",
        "float64": "def variance(x):\n    return x.double().var(-1, correction=0)",
        "hostile": (
            "def variance(x):\n" + HOSTILE_PRINTS + "    raise ValueError('gives what divides "
            "by N-1 gives (the property violated: divide by N, the number of entries).')"
        ),
    },
}
CLASS = {  # six students, named mistakes across two notebooks, one hostile hand-in
    "s1": {"centre": "right", "scale": "right", "variance": "right"},
    "s2": {"centre": "global", "scale": "added", "variance": "n-1"},
    "s3": {"centre": "global", "scale": "right", "variance": "float64"},
    "s4": {"centre": "added", "scale": "stub", "variance": "n-1"},
    "s5": {"centre": "raises", "scale": "added", "variance": "right"},
    "s6": {"centre": "hostile", "scale": "hostile", "variance": "hostile"},
    "s7": {"centre": "right", "scale": "grad off", "variance": "right"},  # right, one claim
}
EXPECTED = {
    ("97.1", "mistake", "the global mean subtracted"): 2,
    ("97.1", "mistake", "the mean added"): 1,
    ("97.1", "unnamed", ""): 2,  # the answer that raised, and the hostile one
    ("97.2", "mistake", "k added, not multiplied"): 2,
    ("98.1", "mistake", "divides by N-1"): 2,
    ("98.1", "property", "the stated dtype"): 1,
    ("98.1", "unnamed", ""): 1,  # the hostile one
}
NOTEBOOKS = {
    "97_report.ipynb": ("nb97", ["centre", "scale"]),
    "98_report.ipynb": ("nb98", ["variance"]),
}


def _install(name: str) -> object:
    """``course.checks.<name>`` from tests/fixtures/report (for the grader's process)."""
    source = (FIXTURES / f"{name}_checks.py").read_bytes()
    spec = importlib.util.spec_from_loader(f"course.checks.{name}", loader=None)
    module = importlib.util.module_from_spec(spec)
    exec(compile(source, f"{name}.py", "exec"), module.__dict__)  # noqa: S102 - our fixture
    return module


@pytest.fixture
def synthetic_checks(monkeypatch):
    """nb97 and nb98 for the grader, its trusted replay and the student's private copy."""
    from course.grading import kernel, verdict

    modules = {}
    for name in ("nb97", "nb98"):
        modules[name] = _install(name)
        monkeypatch.setitem(sys.modules, f"course.checks.{name}", modules[name])
        monkeypatch.setitem(verdict.trusted_checks(), f"course.checks.{name}", modules[name])
    private = kernel.private_course
    extra = {f"checks/{n}.py": (FIXTURES / f"{n}_checks.py").read_bytes() for n in modules}

    def with_fixtures(scratch, files, number):
        return private(scratch, {**files, **extra}, number)

    monkeypatch.setattr(kernel, "private_course", with_fixtures)
    return modules


def _replayed(modules, tmp_path: Path) -> dict[str, list[ExerciseResult]]:
    """The fixture class graded by the trusted replay, in this process: each answer probed as
    the student's process probes it, its record replayed by the grader's own check."""
    from course.framework.check import probe
    from course.framework.observe import REPORTED
    from course.grading import verdict
    from course.grading.instrument import record_path
    from course.grading.kernel import Run
    from course.grading.merging import CheckCall

    graded = {}
    for student, answers in CLASS.items():
        rows = []
        for notebook, (module_name, checks) in NOTEBOOKS.items():
            module = modules[module_name]
            folder = tmp_path / student / module_name
            folder.mkdir(parents=True)
            calls = []
            for name in checks:
                check = getattr(module, name)
                namespace: dict = {}
                exec(ANSWERS[name][answers[name]], {"torch": __import__("torch")}, namespace)  # noqa: S102
                record = probe(check, namespace[name], seed=0, effects=REPORTED)[1]
                record_path(folder, name).write_bytes(record)
                exercise = check.exercise.removeprefix("Exercise ")
                calls.append(CheckCall(exercise, name, 0, 1, ()))
            run = Run(folder, {}, "complete")
            rows += verdict.verdicts(notebook, calls, run, 0, module, {}, {})
        graded[student] = rows
    return graded


def test_the_report_counts_exactly_the_mistakes_the_replay_named(tmp_path, synthetic_checks):
    graded = _replayed(synthetic_checks, tmp_path)
    statuses = {s: [r.status for r in rows] for s, rows in graded.items()}
    assert statuses["s1"] == [PASSED] * 3
    assert statuses["s4"] == [FAILED, NOT_IMPLEMENTED, FAILED]
    out = _write_out(tmp_path / "out", graded)
    report.make_report(out)
    assert _counts(out) == EXPECTED
    # The hostile hand-in's own failure named a mistake and a property: neither was recorded.
    hostile = {r.exercise: r for r in graded["s6"]}
    assert hostile["97.1"].status == FAILED
    assert (hostile["97.1"].mistake, hostile["97.1"].prop) == (None, None)
    assert "subtract each row's own mean" in hostile["97.1"].message  # its words, shown to it
    # Grad mode left off: passed, the claim seen and not graded, for the student and the report.
    scaled = next(r for r in graded["s7"] if r.exercise == "97.2")
    assert scaled.status == PASSED and scaled.notes, scaled.notes
    assert all("gradient tracking" in n and n in scaled.message for n in scaled.notes)
    assert all(not r.notes for s, rows in graded.items() if s != "s7" for r in rows)
    recorded = json.loads((out / report.RECORDS).read_text(encoding="utf-8"))
    s7 = next(e for e in recorded["students"] if e["student"] == "s7")
    assert [r["notes"] for r in s7["results"]] == [[], scaled.notes, []]
    seen = [r for r in _csv_rows(out) if r["kind"] == report.SEEN]
    assert [(r["name"], r["exercise"], r["count"]) for r in seen] == [
        (note, "97.2", "1") for note in sorted(scaled.notes)
    ]


@pytest.mark.slow
def test_a_graded_class_reports_the_mistakes_and_the_hostile_hand_in_moves_no_count(
    tmp_path, synthetic_checks, monkeypatch
):
    from course import classroom
    from course.grading import kernel

    monkeypatch.setenv(kernel.RESTORE_ENV, "0")
    templates = tmp_path / "templates"
    for notebook, (module_name, checks) in NOTEBOOKS.items():
        cells = [
            nbformat.v4.new_code_cell(
                f"import torch\nfrom course.checks import {module_name} as check"
            )
        ]
        for name in checks:
            cells += [
                nbformat.v4.new_markdown_cell(f"## Exercise {name}\n\nWrite `{name}`."),
                nbformat.v4.new_code_cell(
                    f"def {name}(*args):\n    # TODO: write {name}\n    raise NotImplementedError"
                ),
                nbformat.v4.new_code_cell(f"check.{name}({name})"),
            ]
        template = nbformat.v4.new_notebook(cells=cells)
        templates.mkdir(exist_ok=True)
        nbformat.write(template, templates / notebook)
        for student in ("s2", "s4", "s6", "s7"):  # a smaller class: a hand-in is a kernel run
            hand_in = nbformat.from_dict(json.loads(json.dumps(template)))
            for name in checks:
                cell = next(c for c in hand_in.cells if c.source.startswith(f"def {name}("))
                cell.source = ANSWERS[name][CLASS[student][name]]
            (tmp_path / "class" / student).mkdir(parents=True, exist_ok=True)
            nbformat.write(hand_in, tmp_path / "class" / student / notebook)
    out = tmp_path / "out"
    # Two workers, forked from this process (course.classroom._run_calls): they inherit the
    # synthetic checks installed above, as the grader's own process holds them.
    graded = classroom.grade_class(tmp_path / "class", out, templates, jobs=2, log=lambda _: None)
    assert {r.status for r in graded["s6"]} == {FAILED, PASSED}
    report.make_report(out)
    assert _counts(out) == {
        ("97.1", "mistake", "the global mean subtracted"): 1,
        ("97.1", "mistake", "the mean added"): 1,
        ("97.1", "unnamed", ""): 1,
        ("97.2", "mistake", "k added, not multiplied"): 1,
        ("98.1", "mistake", "divides by N-1"): 2,
        ("98.1", "unnamed", ""): 1,
    }
    # s7's right scale left grad mode off: passed, seen and not graded, the only claim recorded.
    recorded = json.loads((out / report.RECORDS).read_text(encoding="utf-8"))
    noted = {
        (e["student"], r["exercise"], r["status"])
        for e in recorded["students"]
        for r in e["results"]
        if r["notes"]
    }
    assert noted == {("s7", "97.2", PASSED)}
    seen = [r for r in _csv_rows(out) if r["kind"] == report.SEEN]
    assert seen and {(r["exercise"], r["count"]) for r in seen} == {("97.2", "1")}
    assert all("gradient tracking" in r["name"] for r in seen)
    assert output.verify(out) == []


# --- in a browser ------------------------------------------------------------------------------

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


@pytest.fixture(scope="module")
def browser():
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip("needs headless Chromium: apt-get install chromium chromium-driver")
    import tempfile

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="report-test-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage", "--window-size=1280,900", f"--user-data-dir={profile}",
    ):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd(  # no network: any request the page makes fails
        "Network.emulateNetworkConditions",
        {"offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0},
    )
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


FIGURES_JS = """
return [...document.querySelectorAll('svg.figure')].map(svg => {
  const box = svg.getBoundingClientRect();
  const marks = [...svg.querySelectorAll('rect')].filter(r => {
    const b = r.getBoundingClientRect();
    return b.width > 0 && b.height > 0;
  });
  const fills = new Set(marks.map(r => getComputedStyle(r).fill));
  const text = svg.querySelector('text');
  return [box.width, box.height, marks.length, [...fills],
          text ? getComputedStyle(text).fill : null];
});
"""


def test_the_page_shows_its_figures_in_light_and_dark_without_a_network(browser, tmp_path):
    graded = _synthetic_class(6, seed=1)
    out = _write_out(tmp_path / "out", graded)
    page = report.make_report(out)[0]
    seen = {}
    for scheme in ("light", "dark"):
        browser.execute_cdp_cmd(
            "Emulation.setEmulatedMedia",
            {"features": [{"name": "prefers-color-scheme", "value": scheme}]},
        )
        browser.get(page.as_uri())
        resources = browser.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)"
        )
        assert resources == [], resources  # nothing fetched: no font, no image, no script
        figures = browser.execute_script(FIGURES_JS)
        assert len(figures) == 3
        for width, height, marks, _, _ in figures:
            assert width > 100 and height > 20 and marks > 0
        heat = figures[0]
        assert len(heat[3]) == 3, heat[3]  # passed, failed, not started: three colours
        background = browser.execute_script(
            "return getComputedStyle(document.body).backgroundColor"
        )
        seen[scheme] = (background, figures[0][3], figures[0][4])
    assert seen["light"][0] == "rgb(255, 255, 255)"
    assert seen["dark"][0] == "rgb(13, 17, 23)"
    assert seen["light"][2] != seen["dark"][2]  # the figures' text follows the scheme


def test_make_grade_says_how_to_make_the_report_and_make_report_makes_it():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    grade = makefile.split("\ngrade:", 1)[1].split("\n\n", 1)[0]
    assert "make report OUT=" in grade.splitlines()[-1]
    target = makefile.split("\nreport:", 1)[1].split("\n\n", 1)[0]
    assert '-m course.grading.report "$$OUT"' in target and "--names" in target
    assert " report " in makefile.split(".PHONY:", 1)[1].split("\n", 1)[0]

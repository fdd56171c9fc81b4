"""The class report: what a graded class got wrong, by named mistake (``make report OUT=...``).

Reads only what ``make grade`` wrote in OUT: ``records.json`` (every student's trusted results,
the named mistake or the property violated of each failed exercise, as the grader's replay
decided them) and the manifest that says whether OUT is as graded. It never runs anything
again: the counts are those of the grades. It writes, beside them:

* ``report.html``: one self-contained page (inline SVG figures, no script, no link out) that
  reads in light and dark colour schemes: a heat map of students by exercises, each exercise's
  pass rate, each exercise's named mistakes (with the sentence of the exercise text each breaks)
  and the properties violated where no named mistake matched, what was seen in students'
  processes and not graded (:func:`course.framework.observe.claim`'s notes, by exercise and student), and
  the exercises most left not started;
* ``report.csv``: one row per exercise and per mistake, property or note seen and not graded,
  with counts; every text cell quoted and formula starts neutralised, safe under "," and ";".

Students are "student 1..N" (a stable order that tells nothing of their names) unless
``--names``: instructors project this page in class.

A Gradescope export is not read: its grades hold a score per question, and what the autograder
said per exercise comes back, at best, as text, in which a hand-in's own words (printed, raised)
stand beside the check's; counting mistakes from that text would let a hand-in move the counts.
Grade the exported submissions with ``make grade`` instead (:data:`GRADESCOPE_EXPORT`).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import html
import io
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from course.framework.contract import ERROR, FAILED, MISSING, NOT_IMPLEMENTED, PASSED, TIMEOUT

RECORDS = "records.json"
RECORDS_FORMAT = "course-grading-records/1"
HTML_NAME, CSV_NAME = "report.html", "report.csv"
# The heat map's three states: what a student did with an exercise.
STATES = {
    PASSED: "passed",
    FAILED: "failed",
    ERROR: "failed",
    TIMEOUT: "failed",
    NOT_IMPLEMENTED: "not started",
    MISSING: "not started",
}
GRADESCOPE_EXPORT = (
    "{out} holds a Gradescope export, not what `make grade` writes. The report does not read "
    "it: Gradescope keeps a score per question, and the checks' named mistakes only as text "
    "beside what the hand-in printed, which would let a hand-in move the counts. Grade the "
    "exported submissions here (`make grade SUBMISSIONS=<the export's zip> OUT=<folder>`), "
    "then `make report OUT=<folder>`."
)


class ReportError(ValueError):
    """OUT is not a graded class this report can read: the message says what to do."""


# --- reading what grading wrote ----------------------------------------------------------------


@dataclass
class Row:
    """One student's result on one exercise, as the grader recorded it."""

    notebook: str
    exercise: str
    status: str
    mistake: str | None = None  # the named mistake the trusted replay matched
    prop: str | None = None  # the property it found violated
    notes: tuple[str, ...] = ()  # claims seen in the student's process and not graded


@dataclass
class Records:
    """A graded class: student key -> its rows, in the grader's order."""

    students: dict[str, list[Row]] = field(default_factory=dict)


def _gradescope_export(out: Path) -> bool:
    if (out / "submission_metadata.yml").is_file() or (out / "results" / "results.json").exists():
        return True
    for path in out.glob("*.csv"):
        head = path.read_text(encoding="utf-8-sig", errors="replace").split("\n", 1)[0]
        if "SID" in head.split(",") and "Total Score" in head:
            return True
    return False


def read_records(out: Path) -> Records:
    """The class OUT holds, from its ``records.json``; a :class:`ReportError` that says what to
    do when OUT is no graded class, was changed since grading, or is a Gradescope export."""
    from course.grading.output import verify

    out = Path(out)
    if not out.is_dir():
        raise ReportError(f"{out} is not a folder: give OUT=<the folder `make grade` wrote>")
    path = out / RECORDS
    if not path.is_file():
        if _gradescope_export(out):
            raise ReportError(GRADESCOPE_EXPORT.format(out=out))
        raise ReportError(
            f"{out} has no {RECORDS}: it is not a class graded by this version of `make grade` "
            "(grade it again: `make grade SUBMISSIONS=<folder> OUT=<folder>`)"
        )
    changed = [line for line in verify(out) if line.startswith(RECORDS)]
    if changed:
        raise ReportError(
            f"{out}/{changed[0]}: the report counts only what the grader recorded; grade again"
        )
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        if raw.get("format") != RECORDS_FORMAT:
            raise ValueError(f"format {raw.get('format')!r}, expected {RECORDS_FORMAT!r}")
        students = {
            str(entry["student"]): [
                Row(
                    str(r["notebook"]),
                    str(r["exercise"]),
                    str(r["status"]),
                    r.get("mistake") or None,
                    r.get("prop") or None,
                    _notes(r.get("notes")),
                )
                for r in entry["results"]
            ]
            for entry in raw["students"]
        }
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ReportError(f"{path} is not a grading record ({error}); grade again") from None
    return Records(students)


def _notes(value: object) -> tuple[str, ...]:
    """A row's notes as recorded: a list of texts; none where the field is missing (a class
    graded before notes were recorded)."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(note, str) for note in value):
        raise TypeError(f"notes {value!r:.60}, expected a list of texts")
    return tuple(value)


def records_json(graded: Iterable[tuple[str, Iterable]]) -> str:
    """``records.json``'s text for ``(student key, trusted results)`` pairs: what the report
    reads, written by the grader beside grades.csv from the same results."""
    students = [
        {
            "student": student,
            "results": [
                {
                    "notebook": r.notebook,
                    "exercise": r.exercise,
                    "status": r.status,
                    "mistake": r.mistake if r.status == FAILED else None,
                    "prop": r.prop if r.status == FAILED else None,
                    "notes": list(r.notes),
                }
                for r in results
            ],
        }
        for student, results in graded
    ]
    return json.dumps({"format": RECORDS_FORMAT, "students": students}, indent=1) + "\n"


# --- counting ----------------------------------------------------------------------------------


@dataclass
class Exercise:
    """What the class did with one exercise."""

    notebook: str
    id: str
    states: Counter = field(default_factory=Counter)  # passed / failed / not started
    mistakes: Counter = field(default_factory=Counter)  # (named mistake, what it breaks) -> n
    props: Counter = field(default_factory=Counter)  # property violated, no mistake named
    unnamed: int = 0  # failed with neither (an error, a timeout, a message alone)
    seen: dict[str, list[str]] = field(default_factory=dict)  # note -> students, not graded

    @property
    def students(self) -> int:
        return sum(self.states.values())

    @property
    def pass_rate(self) -> float:
        return self.states["passed"] / self.students if self.students else 0.0


def _id_key(item: str) -> tuple:
    return tuple(int(x) if x.isdigit() else 10**6 for x in item.split("."))


def count(records: Records) -> dict[str, Exercise]:
    """Per exercise (in course order): its states, named mistakes and properties, each failed
    answer counted once, under its mistake if one was named, else its property."""
    exercises: dict[str, Exercise] = {}
    for student, rows in records.students.items():
        for row in rows:
            ex = exercises.setdefault(row.exercise, Exercise(row.notebook, row.exercise))
            state = STATES.get(row.status, "failed")
            ex.states[state] += 1
            for note in dict.fromkeys(row.notes):  # whatever the status: it decided nothing
                ex.seen.setdefault(note, []).append(student)
            if state != "failed":
                continue
            if row.mistake:  # its property is the sentence of the text the mistake breaks
                ex.mistakes[(row.mistake, row.prop or "")] += 1
            elif row.prop:
                ex.props[row.prop] += 1
            else:
                ex.unnamed += 1
    return dict(sorted(exercises.items(), key=lambda kv: (kv[1].notebook, _id_key(kv[0]))))


def labels(records: Records, names: bool) -> dict[str, str]:
    """Student key -> what the report shows: the name, or "student N" numbered in an order
    drawn from a digest of the key (stable, and telling nothing of the name's place)."""
    keys = list(records.students)
    if names:
        from course.grading.names import shown

        return {k: shown(k) for k in sorted(keys)}

    def digest(key: str) -> str:
        return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()

    return {k: f"student {i}" for i, k in enumerate(sorted(keys, key=digest), start=1)}


# --- report.csv --------------------------------------------------------------------------------

CSV_COLUMNS = (
    "notebook", "exercise", "kind", "name", "count", "students", "passed", "failed",
    "not started", "sentence of the text", "students seen",
)  # fmt: skip
SEEN = "seen not graded"  # report.csv's kind of a note seen in students' processes


# A separator inside a cell followed by a formula start: where a spreadsheet splits a comma-
# separated file on ";" (Excel in most of Europe) a quoted cell is cut there, and the rest would
# start a cell of its own.
_CUT_BEFORE_FORMULA = re.compile(r"([,;]\s*)(?=[=+\-@\t\r])")


def _text_cell(value: str) -> str:
    """A text cell of report.csv: :func:`~course.grading.names.csv_cell` (one line, a formula
    start neutralised), and every separator inside it followed by a formula start too."""
    from course.grading.names import csv_cell

    return _CUT_BEFORE_FORMULA.sub(r"\1'", csv_cell(value))


def report_csv(exercises: dict[str, Exercise], shown: dict[str, str]) -> str:
    """One row per exercise (kind ``exercise``: its counts), then one per named mistake
    (``mistake``), property violated with no mistake named (``property``), failed answers
    with neither (``unnamed``) and note seen in students' processes and not graded
    (:data:`SEEN`: the note, how many students, and which as ``shown`` labels them). Text cells
    are quoted and neutralised, numbers are not."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    for ex in exercises.values():
        states = [ex.states["passed"], ex.states["failed"], ex.states["not started"]]
        head = [_text_cell(ex.notebook), _text_cell(ex.id)]
        writer.writerow([*head, "exercise", "", ex.students, ex.students, *states, "", ""])
        rows = [("mistake", name, said, n) for (name, said), n in ex.mistakes.most_common()]
        rows += [("property", name, "", n) for name, n in ex.props.most_common()]
        for kind, name, said, n in rows:
            writer.writerow(
                [*head, kind, _text_cell(name), n, ex.students, *states, _text_cell(said), ""]
            )
        if ex.unnamed:
            writer.writerow([*head, "unnamed", "", ex.unnamed, ex.students, *states, "", ""])
        for note, students in _seen(ex, shown):
            who = "; ".join(students)
            cells = [_text_cell(note), len(students), ex.students, *states, "", _text_cell(who)]
            writer.writerow([*head, SEEN, *cells])
    return buffer.getvalue()


def _seen(ex: Exercise, shown: dict[str, str]) -> list[tuple[str, list[str]]]:
    """``(note, the students' labels)`` of ``ex``, the most seen first; a note as
    :func:`course.grading.names.shown` shows text (one line, no control character)."""
    from course.grading.names import shown as one_line

    ranked = sorted(ex.seen.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return [
        (one_line(note), sorted((shown[s] for s in students), key=_label_key))
        for note, students in ranked
    ]


# --- report.html -------------------------------------------------------------------------------

STYLE = """
:root { color-scheme: light dark; --bg: #ffffff; --fg: #1f2328; --muted: #59636e;
  --line: #d1d9e0; --passed: #0969da; --failed: #bc4c00; --not-started: #d1d9e0;
  --idle: #6e7781; }
@media (prefers-color-scheme: dark) {
  :root { --bg: #0d1117; --fg: #e6edf3; --muted: #9198a1; --line: #3d444d;
    --passed: #4493f8; --failed: #f0883e; --not-started: #3d444d; --idle: #9198a1; }
}
body { background: var(--bg); color: var(--fg); font: 15px/1.5 system-ui, sans-serif;
  max-width: 1100px; margin: 2em auto; padding: 0 1em; }
h1, h2, h3 { line-height: 1.25; }
.muted { color: var(--muted); }
svg text { fill: var(--fg); font: 12px system-ui, sans-serif; }
svg .passed { fill: var(--passed); } svg .failed { fill: var(--failed); }
svg .not-started { fill: var(--not-started); } svg .idle { fill: var(--idle); }
svg .track { fill: var(--line); }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border-bottom: 1px solid var(--line); padding: 0.25em 0.75em; text-align: left;
  vertical-align: top; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1em 0; overflow-x: auto; }
.key span { display: inline-block; width: 0.9em; height: 0.9em; margin: 0 0.3em 0 1em;
  vertical-align: -0.1em; }
.key .passed { background: var(--passed); } .key .failed { background: var(--failed); }
.key .not-started { background: var(--not-started); }
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def heat_map(records: Records, order: list[str], shown: dict[str, str]) -> str:
    """Students (rows) by exercises (columns), one square each: passed, failed, not started."""
    cell, left, top = 16, 110, 44
    width, height = left + cell * len(order) + 10, top + cell * len(records.students) + 10
    parts = [
        f'<svg class="figure" role="img" aria-label="students by exercises" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">'
    ]
    for j, ex in enumerate(order):
        x = left + cell * j + cell / 2
        parts.append(
            f'<text x="{x}" y="{top - 6}" transform="rotate(-60 {x} {top - 6})">{_e(ex)}</text>'
        )
    for i, student in enumerate(sorted(records.students, key=lambda k: _label_key(shown[k]))):
        y = top + cell * i
        parts.append(
            f'<text x="{left - 6}" y="{y + 12}" text-anchor="end">{_e(shown[student])}</text>'
        )
        states = {
            row.exercise: (row.status, STATES.get(row.status, "failed"))
            for row in records.students[student]
        }
        for j, ex in enumerate(order):
            status, state = states.get(ex, (MISSING, "not started"))
            parts.append(
                f'<rect class="{state.replace(" ", "-")}" x="{left + cell * j}" y="{y}" '
                f'width="{cell - 2}" height="{cell - 2}"><title>{_e(shown[student])}, '
                f"{_e(ex)}: {_e(status)}</title></rect>"
            )
    parts.append("</svg>")
    return "".join(parts)


def _label_key(label: str) -> tuple:
    number = label.removeprefix("student ")
    return (0, int(number), "") if number.isdigit() else (1, 0, label)


def bars(rows: list[tuple[str, float, str]], what: str, colour: str) -> str:
    """A horizontal bar per ``(label, fraction 0..1, the value in words)``, of the class
    ``colour`` (passed, idle)."""
    line, left, span = 20, 190, 360
    width, height = left + span + 150, line * len(rows) + 10
    parts = [
        f'<svg class="figure" role="img" aria-label="{_e(what)}" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">'
    ]
    for i, (label, fraction, said) in enumerate(rows):
        y = 4 + line * i
        parts.append(f'<text x="{left - 8}" y="{y + 12}" text-anchor="end">{_e(label)}</text>')
        parts.append(f'<rect class="track" x="{left}" y="{y + 2}" width="{span}" height="12"/>')
        parts.append(
            f'<rect class="{colour}" x="{left}" y="{y + 2}" width="{span * fraction:.1f}" height="12">'
            f"<title>{_e(label)}: {_e(said)}</title></rect>"
        )
        parts.append(f'<text x="{left + span + 8}" y="{y + 12}">{_e(said)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _mistake_tables(exercises: dict[str, Exercise]) -> list[str]:
    parts = []
    for ex in exercises.values():
        failed = ex.states["failed"]
        parts.append(
            f"<h3>Exercise {_e(ex.id)} <span class='muted'>({_e(ex.notebook)})</span></h3>"
        )
        if not failed:
            parts.append("<p class='muted'>No failed answer.</p>")
            continue
        idle = ex.states["not started"]
        parts.append(
            f"<p>{failed} of {ex.students} students failed it"
            + (f" ({idle} did not start it)." if idle else ".")
            + "</p>"
        )
        if ex.mistakes:
            parts.append(
                "<table><tr><th>named mistake</th><th>answers</th>"
                "<th>the sentence of the text it breaks</th></tr>"
            )
            for (name, said), n in ex.mistakes.most_common():
                parts.append(
                    f"<tr><td>{_e(name)}</td><td class='n'>{n}</td><td>{_e(said) or '—'}</td></tr>"
                )
            parts.append("</table>")
        if ex.props:
            parts.append(
                "<table><tr><th>property violated (no named mistake matched)</th>"
                "<th>answers</th></tr>"
            )
            for name, n in ex.props.most_common():
                parts.append(f"<tr><td>{_e(name)}</td><td class='n'>{n}</td></tr>")
            parts.append("</table>")
        if ex.unnamed:
            parts.append(
                f"<p class='muted'>{ex.unnamed} failed with neither a named mistake nor a "
                "property (the code raised, ran out of time, or the check could not run).</p>"
            )
    return parts


def _seen_tables(exercises: dict[str, Exercise], shown: dict[str, str]) -> list[str]:
    parts = [
        "<h2>Seen in students' processes, not graded</h2>",
        "<p class='muted'>What the replay saw reported by a student's own process while grading "
        "(grad mode left off, an input overwritten in place, a flag or an identity): the "
        "notebook's check fails it, but that process could as well have hidden it, so it costs "
        "no point. Review it, and dock by hand (<code>MANUAL=</code>) if you wish.</p>",
    ]
    noted = [ex for ex in exercises.values() if ex.seen]
    if not noted:
        return [*parts, "<p class='muted'>Nothing was seen and left ungraded.</p>"]
    for ex in noted:
        students = len({s for who in ex.seen.values() for s in who})
        parts.append(
            f"<h3>Exercise {_e(ex.id)} <span class='muted'>({_e(ex.notebook)})</span></h3>"
            f"<p>{students} of {ex.students} students.</p>"
            "<table><tr><th>seen, not graded</th><th>students</th><th>who</th></tr>"
        )
        for note, who in _seen(ex, shown):
            parts.append(
                f"<tr><td>{_e(note)}</td><td class='n'>{len(who)}</td>"
                f"<td>{_e(', '.join(who))}</td></tr>"
            )
        parts.append("</table>")
    return parts


def report_html(
    records: Records,
    exercises: dict[str, Exercise],
    names: bool = False,
) -> str:
    """The whole page: self-contained, its figures inline SVG coloured by the page's scheme."""
    shown = labels(records, names)
    order = list(exercises)
    n = len(records.students)
    key = (
        "<p class='key'><span class='passed'></span>passed<span class='failed'></span>failed "
        "(an error or a timeout included)<span class='not-started'></span>not started "
        "(or not handed in)</p>"
    )
    rates = [
        (f"{ex.id} ({ex.notebook[:2]})", ex.pass_rate, f"{ex.states['passed']} of {ex.students}")
        for ex in exercises.values()
    ]
    idle = sorted(
        (ex for ex in exercises.values() if ex.states["not started"]),
        key=lambda ex: (-ex.states["not started"], ex.notebook, _id_key(ex.id)),
    )[:10]
    idle_rows = [
        (f"{ex.id} ({ex.notebook[:2]})", ex.states["not started"] / max(ex.students, 1),
         f"{ex.states['not started']} of {ex.students}")
        for ex in idle
    ]  # fmt: skip
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="color-scheme" content="light dark">',
        "<title>Class report</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>Class report</h1>",
        f"<p>{n} hand-ins, {len(order)} exercises, counted from the grader's records "
        f"({RECORDS}), the same results as the grades."
        + ("" if names else " Students are numbered, not named.")
        + "</p>",
        "<h2>Students by exercises</h2>",
        key,
        f"<figure>{heat_map(records, order, shown)}</figure>",
        "<h2>Pass rate per exercise</h2>",
        f"<figure>{bars(rates, 'pass rate per exercise', 'passed')}</figure>",
        "<h2>What failing answers got wrong</h2>",
        "<p class='muted'>Each failed answer counts once: under the named mistake it matched, "
        "else under the property it violated.</p>",
        *_mistake_tables(exercises),
        *_seen_tables(exercises, shown),
        "<h2>Exercises most left not started</h2>",
        f"<figure>{bars(idle_rows, 'exercises left not started', 'idle')}</figure>"
        if idle_rows
        else "<p class='muted'>Every exercise was started by everyone.</p>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


# --- writing -----------------------------------------------------------------------------------


def make_report(out: Path, names: bool = False) -> tuple[Path, Path, list[str]]:
    """Read OUT's records and write ``report.html`` and ``report.csv`` beside them: ``(page,
    table, what in OUT differs from its manifest)``. Where nothing else differs, the report's
    two files join the manifest (``make grade``'s ``verify`` then covers them too); otherwise
    the manifest is left as the grader wrote it, and the differences are returned."""
    from course.grading import output

    out = Path(out)
    records = read_records(out)
    exercises = count(records)
    files = {
        HTML_NAME: report_html(records, exercises, names).encode("utf-8"),
        CSV_NAME: report_csv(exercises, labels(records, names)).encode("utf-8"),
    }
    others = [line for line in output.verify(out) if line.split(":")[0] not in files]
    for name, data in files.items():
        output.write_file(out / name, data)
    if not others:
        manifest = json.loads((out / output.MANIFEST).read_text(encoding="utf-8"))
        manifest["files"].update(
            {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
        )
        text = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
        output.write_file(out / output.MANIFEST, text.encode("utf-8"))
    return out / HTML_NAME, out / CSV_NAME, others


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course.grading.report", description=__doc__.split("\n")[0]
    )
    parser.add_argument("out", type=Path, help="the folder `make grade` wrote")
    parser.add_argument("--names", action="store_true", help="name the students (NAMES=1)")
    args = parser.parse_args(argv)
    try:
        page, table, others = make_report(args.out, names=args.names)
    except ReportError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for line in others:
        print(f"warning: {args.out}: {line} (the report counts {RECORDS} only)", file=sys.stderr)
    print(f"wrote {page} and {table}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

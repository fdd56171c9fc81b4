"""Time budgets of the solution notebooks: the one place they are written down.

``NOTEBOOK_BUDGET_S[NN]`` is the most time, in seconds, that notebook NN may take under
``make check`` (nbval, every cell) on a 2-core laptop CPU with the real datasets. The
root ``conftest.py`` prints each notebook's measured time against it; a notebook's CPU
``CONFIG`` is sized to fit it, and a GPU only makes the run bigger, never the budget.
docs/DESIGN.md explains them. (A student's working time, 30-90 minutes, is another
thing: each notebook's header states it, and the README's table repeats it.)

``RUN_TIMES`` is the one table of *measured* times (when, where, the seconds per notebook) and
``STUDENT_MINUTES`` the working-time estimates. ``python -m course.tooling.nbtools generate`` (``make
exercises``) writes from them the README's *time* column, the run-time table of
``docs/results.md`` and the ``**Time:**`` line of every notebook header (``write_times``);
``nbtools check`` and ``tests/test_timings.py`` fail when those disagree with the table. After
a new idle ``make check``, change ``RUN_TIMES`` and run ``make exercises``.

``BENCH_RUNS`` (``make bench``) and ``PRECISION_RUNS`` give the tables of ``docs/results.md``,
``GRADING_COSTS`` those of ``docs/instructors.md``; each generated block sits between two
``<!-- name -->`` markers (``PAGES`` says which page holds which).
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

NOTEBOOK_BUDGET_S: dict[str, int] = {
    "00": 60,
    "01": 60,
    "02": 60,
    "03": 120,
    "04": 60,
    "05": 180,
    "06": 270,
    "07": 300,
    "08": 330,
    "09": 120,
    # 10: the target is a Run All of at most 9 minutes (540 s) on an idle 2-core CPU in float32,
    # and nbval's budget that times 1.25, the smallest margin of the other training notebooks (08:
    # 330 s for its 264.5 s in RUN_TIMES; 06 and 07 have 1.5 and 1.7). Its stored run (LoRA r=4 in
    # every block, 750 steps, evaluated at each quarter; one rank: two took 655 s) took 398 s on
    # the machine named in RUN_TIMES["machines"]["10"] (see RUN_TIMES).
    "10": 675,
}

# The sum is the budget of all notebooks together under `make check`.
TOTAL_BUDGET_S: int = sum(NOTEBOOK_BUDGET_S.values())


# Working time a student needs for each notebook (reading and exercises), in minutes: an estimate.
STUDENT_MINUTES: dict[str, int] = {
    "00": 30,
    "01": 60,
    "02": 60,
    "03": 60,
    "04": 45,
    "05": 90,
    "06": 90,
    "07": 60,
    "08": 60,
    "09": 75,
    "10": 60,
}

# The latest recorded `make check`: seconds per solution notebook (nbval, every cell, the real
# datasets), as printed by the per-notebook table at its end (the root conftest.py).
RUN_TIMES: dict = {
    "when": "2026-11-27",
    "where": (
        "a 2-core x86-64 virtual machine (AMD EPYC with avx512_bf16; every notebook in float32, "
        "the default), a fresh clone running `.ci/run` at commit 794f16e, otherwise idle (load "
        "average 1 to 2, the run's own threads included)"
    ),
    "make_check_s": 1714,  # the whole `make check` of that run (1912 passed, 8 skipped, 1 failed)
    # The machine in a few words, for each notebook header's Time line (and the precision the
    # notebooks ran in there): the header says where the time was measured, and that it was idle.
    "machine": "an idle 2-core x86-64 CPU (AMD EPYC, float32)",
    "seconds": {
        "00": 1.9,
        "01": 9.8,
        "02": 6.6,
        "03": 9.0,
        "04": 5.7,
        "05": 58.3,
        "06": 178.7,
        "07": 179.0,
        "08": 264.5,
        "09": 69.2,
        "10": 398.0,  # see "elsewhere"
    },
    # Notebooks whose figure is not that make check's nbval time, and where it comes from.
    "elsewhere": {
        "10": (
            "`make solutions NB=10` (its cells' time as printed, 398 s; 405 s from start to save) "
            "on 2026-11-28 on another 2-core x86-64 virtual machine (Intel Xeon at 2.80GHz, no "
            "native bf16, float32), otherwise idle (load average 1.3 at its start, 1.8 at its "
            "end, the run's own threads included)"
        ),
    },
    # Notebooks measured on another machine or day than the table's: the header's words for it.
    "machines": {"10": ("an idle 2-core x86-64 CPU (Intel Xeon, float32)", "2026-11-28")},
}

_ROOT = Path(__file__).resolve().parents[2]
_HEADER_LINE = re.compile(r"^\*\*Time:\*\*.*$", re.MULTILINE)
# Which page holds which generated text (paths relative to the root).
README_PAGE = "README.md"
RESULTS_PAGE = "docs/results.md"
INSTRUCTORS_PAGE = "docs/instructors.md"
_RUN_TIME_TABLE = re.compile(r"<!-- run times -->.*?<!-- /run times -->", re.DOTALL)


def run_all_phrase(seconds: float) -> str:
    """``seconds`` in words: "under a minute", else the nearest half minute ("about 3½ minutes")."""
    if seconds < 60:
        return "under a minute"
    halves = int(seconds / 30 + 0.5)
    whole, half = divmod(halves, 2)
    return f"about {whole}{'½' if half else ''} minute{'' if halves == 2 else 's'}"


def header_time_line(nn: str) -> str:
    """The ``**Time:**`` line of notebook ``nn``'s header."""
    machine, when = RUN_TIMES.get("machines", {}).get(nn, (RUN_TIMES["machine"], RUN_TIMES["when"]))
    return (
        f"**Time:** about {STUDENT_MINUTES[nn]} minutes; *Run All* took "
        f"{run_all_phrase(RUN_TIMES['seconds'][nn])} on {machine}, measured "
        f"{when}; longer while other programs keep the CPU busy."
    )


def readme_time(nn: str) -> str:
    """The README table's *time* cell of notebook ``nn``: the student's working time."""
    return f"{STUDENT_MINUTES[nn]} min"


def cpu_time(nn: str) -> str:
    """Notebook ``nn``'s measured run time under ``make check``, in whole seconds."""
    return f"{int(RUN_TIMES['seconds'][nn] + 0.5)} s"


def run_time_table(root: Path | None = None) -> str:
    """The run-time table of docs/results.md and the paragraph under it (between markers)."""
    stems = sorted(
        path.stem
        for path in ((root or _ROOT) / "solutions").glob("[0-9][0-9]_*.ipynb")
        if path.name[:2] in STUDENT_MINUTES
    )
    rows = [
        "<!-- run times -->",
        "| # | notebook | student time | CPU time | budget |",
        "|---|---|---|---|---|",
        *(
            f"| {stem[:2]} | `{stem}` | {readme_time(stem[:2])} | {cpu_time(stem[:2])} | "
            f"{NOTEBOOK_BUDGET_S[stem[:2]]} s |"
            for stem in stems
        ),
    ]
    text = (
        "*Student time* is the working time each notebook's header estimates. *CPU time* is the "
        "time of the solution notebook under `make check` (nbval, every cell) with the real "
        f"datasets, measured on {RUN_TIMES['when']} on {RUN_TIMES['where']}; that whole "
        f"`make check` took {RUN_TIMES['make_check_s']} s"
        + "".join(
            f"; notebook {nn}'s figure is {how}"
            for nn, how in RUN_TIMES.get("elsewhere", {}).items()
        )
        + ". *Budget* is the most a notebook may take there. The columns, the README's *time* "
        "column and the *Time* line of each notebook's header are written by `make exercises` "
        "from `course/tooling/budgets.py`; a test fails when they disagree."
    )
    return "\n".join(rows) + "\n\n" + wrap(text) + "\n<!-- /run times -->"


def wrap(text: str) -> str:
    """``text`` filled to the README's 96 columns, never breaking inside a `code span`."""
    # The spans' spaces are held as NULs while the text is wrapped.
    held = re.sub(r"`[^`]*`", lambda m: m.group(0).replace(" ", "\0"), text)
    wrapped = textwrap.fill(held, width=96, break_long_words=False, break_on_hyphens=False)
    return wrapped.replace("\0", " ")


def render_readme(text: str) -> str:
    """README ``text`` with the notebook table's last cell (the student's time) generated."""
    return re.sub(
        r"^(?=\| (\d\d) \|)(\|.*?)\| [^|]* \|$",
        lambda m: (
            f"{m.group(2)}| {readme_time(m.group(1))} |"
            if m.group(1) in STUDENT_MINUTES
            else m.group(0)
        ),
        text,
        flags=re.MULTILINE,
    )


def render_results(text: str, root: Path | None = None) -> str:
    """docs/results.md ``text`` with its run-time, bench and precision tables generated."""
    text = _RUN_TIME_TABLE.sub(lambda _: run_time_table(root), text, count=1)
    return render_precision(render_bench(text))


def render_instructors(text: str) -> str:
    """docs/instructors.md ``text`` with its grading-cost table and sentence generated."""
    return render_class_grading_time(render_grading(text))


# Grading, measured: one complete notebook (its solution as the hand-in) graded as
# `make gradescope ONLY=NN` grades it: `python -m course.grading.cost -- python -m
# course.classroom progress --dir D -j 1`, D holding that notebook's solution alone (CPU seconds
# of the whole process tree: grader, setup check, sandbox, notebook runner, kernel; peak memory:
# the sum of the tree's proportional set sizes, sampled every 0.2 s). The engine's notebook bound
# (`course.grading.engine.deadline_s`) is computed from `cpu_s`. "complete" is a whole
# submission, every notebook, JOBS=1. `make exercises` writes docs/instructors.md's grading table
# from it; tests/test_grading_costs.py fails when that page disagrees, or when a notebook no longer fits
# Gradescope's defaults.
GRADING_COSTS: dict = {
    "when": "2026-11-27",
    "where": (
        "a 2-core x86-64 virtual machine (AMD EPYC), two other jobs running (load average 2.3 "
        "to 5.2; the measurement at raised priority, `nice -n -10`), at commit caa2753"
    ),
    "cpu_s": {
        "00": 8.9,
        "01": 8.8,
        "02": 8.7,
        "03": 10.0,
        "04": 12.9,
        "05": 12.9,
        "06": 17.4,
        "07": 10.2,
        "08": 12.2,
        "09": 11.7,
        "10": 16.5,
    },
    "peak_mib": {
        "00": 641,
        "01": 640,
        "02": 641,
        "03": 640,
        "04": 678,
        "05": 660,
        "06": 806,
        "07": 694,
        "08": 744,
        "09": 666,
        "10": 782,
    },
    # The same command in a cgroup limited to Gradescope's defaults (`--cpus 0.5 --memory-mb
    # 768`), right after each unlimited run: wall-clock and CPU seconds, the cgroup's peak charge
    # (memory.max_usage_in_bytes) and its kills for memory; every exercise passed in each.
    "limited": {
        "when": "2026-11-27",
        "where": "the same machine, load and commit",
        "runs": {
            "00": {"wall_s": 18.9, "cpu_s": 9.4, "peak_mib": 460, "oom_kills": 0},
            "01": {"wall_s": 18.5, "cpu_s": 9.2, "peak_mib": 467, "oom_kills": 0},
            "02": {"wall_s": 16.9, "cpu_s": 8.4, "peak_mib": 463, "oom_kills": 0},
            "03": {"wall_s": 25.3, "cpu_s": 12.6, "peak_mib": 462, "oom_kills": 0},
            "04": {"wall_s": 24.8, "cpu_s": 12.3, "peak_mib": 490, "oom_kills": 0},
            "05": {"wall_s": 23.2, "cpu_s": 11.5, "peak_mib": 469, "oom_kills": 0},
            "06": {"wall_s": 30.8, "cpu_s": 15.1, "peak_mib": 623, "oom_kills": 0},
            "07": {"wall_s": 23.0, "cpu_s": 11.3, "peak_mib": 507, "oom_kills": 0},
            "08": {"wall_s": 25.8, "cpu_s": 12.8, "peak_mib": 549, "oom_kills": 0},
            "09": {"wall_s": 22.3, "cpu_s": 11.0, "peak_mib": 469, "oom_kills": 0},
            "10": {"wall_s": 29.9, "cpu_s": 14.8, "peak_mib": 589, "oom_kills": 0},
        },
    },
    "complete": {
        "cpu_s": 67.6,
        "wall_s": 74.9,
        "peak_mib": 901,
        "when": "2026-11-29",
        "where": (
            "a 2-core x86-64 virtual machine (Intel Xeon at 2.80GHz, no native bf16), otherwise "
            "idle (load average 0.55 at its start; `nice -n -10`), at commit fff88a7"
        ),
    },
}

# What Gradescope gives an autograder unless the assignment asks for more.
GRADESCOPE_DEFAULTS = {"vcpu": 0.5, "memory_mb": 768, "timeout_s": 600}
_GRADING_TABLE = re.compile(r"<!-- grading costs -->.*?<!-- /grading costs -->", re.DOTALL)


def fits_gradescope(nn: str) -> bool:
    """Whether grading notebook ``nn`` alone fits Gradescope's default memory and time, as
    measured in a cgroup limited to them (the whole command, setup check included)."""
    limited = GRADING_COSTS["limited"]["runs"][nn]
    limit_mib = GRADESCOPE_DEFAULTS["memory_mb"] * 1e6 / 2**20
    return (
        limited["peak_mib"] < limit_mib
        and limited["wall_s"] < GRADESCOPE_DEFAULTS["timeout_s"]
        and not limited["oom_kills"]
    )


def grading_table() -> str:
    """The grading-cost table of docs/instructors.md and the lines under it (between markers)."""
    limit_mib = GRADESCOPE_DEFAULTS["memory_mb"] * 1e6 / 2**20
    limited = GRADING_COSTS["limited"]
    rows = [
        "<!-- grading costs -->",
        "| `make gradescope` | CPU time | peak memory | at half a CPU and 768 MB: wall-clock "
        "(CPU), peak charge |",
        "|---|---|---|---|",
    ]
    for nn in sorted(GRADING_COSTS["cpu_s"]):
        run = limited["runs"][nn]
        rows.append(
            f"| `ONLY={nn}` | {GRADING_COSTS['cpu_s'][nn]:.1f} s | "
            f"{GRADING_COSTS['peak_mib'][nn]} MiB | "
            f"{run['wall_s']:.0f} s ({run['cpu_s']:.1f} s), {run['peak_mib']} MiB |"
        )
    done = GRADING_COSTS["complete"]
    over = [nn for nn in GRADING_COSTS["cpu_s"] if not fits_gradescope(nn)]
    fitting = (
        f"notebooks {', '.join(over)} did not fit them in that cgroup."
        if over
        else "every notebook fitted them in that cgroup."
    )
    above = [nn for nn, mib in sorted(GRADING_COSTS["peak_mib"].items()) if mib >= limit_mib]
    text = (
        f"*CPU time* and *peak memory*: measured on {GRADING_COSTS['when']} on "
        f"{GRADING_COSTS['where']}: each notebook's solution graded alone as `make gradescope "
        "ONLY=NN` grades it, the setup check included, CPU time of the whole process tree and "
        "the peak of its summed proportional set sizes (`python -m course.grading.cost`); the "
        "notebook bound above is computed from this CPU time. *At half a CPU and 768 MB*: the "
        "same command in a cgroup limited to Gradescope's defaults (`python -m "
        "course.grading.cost --cpus 0.5 --memory-mb 768 -- ...`), measured on "
        f"{limited['when']} on {limited['where']}: its wall-clock and CPU time and the cgroup's "
        "peak charge, with "
        f"{sum(r['oom_kills'] for r in limited['runs'].values())} kills for memory and every "
        f"exercise passed. Gradescope's defaults are half a vCPU, "
        f"{GRADESCOPE_DEFAULTS['memory_mb']} MB ({limit_mib:.0f} MiB) and 10 minutes: {fitting}"
        + (
            f" The proportional set sizes of {', '.join(above)} sum above {limit_mib:.0f} MiB: "
            "they count the shared libraries' pages, which the kernel drops under a limit, and "
            "here those pages were already cached (charged to other processes), so a fresh "
            "container may charge more than the cgroup did: for these notebooks ask Gradescope "
            "for 1 GB to be safe."
            if above
            else ""
        )
        + f" A complete submission, every notebook in one assignment (`JOBS=1`), took "
        f"{done['cpu_s']:.0f} s of CPU ({done['wall_s']:.0f} s of wall-clock time) and peaked "
        f"at {done['peak_mib']} MiB (measured on {done['when']} on {done['where']}): "
        + (
            "above the default memory, so ask for more for such an assignment, or give each "
            "notebook its own with `ONLY=`."
            if done["peak_mib"] >= limit_mib
            else "within the defaults too."
        )
    )
    return "\n".join(rows) + "\n\n" + wrap(text) + "\n<!-- /grading costs -->"


def render_grading(text: str) -> str:
    """``text`` with its grading-cost table (between the markers) generated."""
    return _GRADING_TABLE.sub(lambda _: grading_table(), text, count=1)


def render_header(source: str, nn: str) -> str:
    """A notebook header's markdown with its ``**Time:**`` line generated."""
    return _HEADER_LINE.sub(lambda _: header_time_line(nn), source, count=1)


# Each generated page and the function that renders it.
PAGES = {
    README_PAGE: lambda text, root: render_readme(text),
    RESULTS_PAGE: render_results,
    INSTRUCTORS_PAGE: lambda text, root: render_instructors(text),
}


def write_times(root: Path = _ROOT, write: bool = True) -> list[Path]:
    """The pages of ``PAGES`` and ``solutions/NN_*.ipynb`` whose times differ from the tables
    above; rewritten when ``write`` (each notebook read, its header cell changed, written back
    at once)."""
    import nbformat  # only the generator needs it

    changed = []
    for name, render in PAGES.items():
        page = root / name
        if not page.exists():
            continue  # a project without that page
        text = page.read_text(encoding="utf-8")
        new = render(text, root)
        if new != text:
            changed.append(page)
            if write:
                page.write_text(new, encoding="utf-8")
    for path in sorted((root / "solutions").glob("[0-9][0-9]_*.ipynb")):
        if path.name[:2] not in STUDENT_MINUTES:
            continue  # not in the tables: tests/test_timings.py asks for every notebook
        notebook = nbformat.read(path, as_version=4)
        header = notebook.cells[0]
        new = render_header(header.source, path.name[:2])
        if new != header.source:
            changed.append(path)
            if write:
                header.source = new
                nbformat.write(notebook, path)
    return changed


# `make bench` (course/tooling/bench.py), measured: one entry per run, and the run's own output, the file
# `python -m course.tooling.bench --json FILE` wrote, stored under docs/bench/ beside what it printed:
# every figure of the bench table is read from those files, none is typed here. "loop": the
# course's fine-tuning loop against transformers' Trainer; "layers": one training step of notebook
# 05's Transformer against torch.nn.Transformer. Each ratio is the median of interleaved rounds
# with its range. CPU seconds are the process's (all threads). `make exercises` writes the bench
# table of docs/results.md from them; tests/test_timings.py fails when that page disagrees. To
# add a run: `make bench JSON=docs/bench/DATE-PRECISION.json`, then an entry below, e.g.
# {"when": "2026-11-28", "where": "a 2-core x86-64 virtual machine (AMD EPYC), torch 2.13.0",
# "command": "make bench JSON=docs/bench/2026-11-28-float32.json", "load": "idle (load average
# 0.1 before the run)", "output": "docs/bench/2026-11-28-float32.json"}.
BENCH_RUNS: list[dict] = [
    {
        "when": "2026-11-27",
        "where": "an idle 2-core x86-64 virtual machine (AMD EPYC with avx512_bf16), torch 2.13.0",
        "command": "make bench JSON=docs/bench/2026-11-27-float32.json",
        "load": "idle (1-minute load average 1.9 before the run: the threads of the notebook run "
        "just before it fading; nothing else running)",
        "output": "docs/bench/2026-11-27-float32.json",
    },
    {
        "when": "2026-11-28",
        "where": "a 2-core x86-64 virtual machine (Intel Xeon at 2.80GHz, no native bf16), torch 2.13.0",
        "command": "make bench JSON=docs/bench/2026-11-28-float32.json",
        "load": "otherwise idle (the load average before the run still falling from a job stopped "
        "just before it), at commit e9c0675",
        "output": "docs/bench/2026-11-28-float32.json",
    },
]


def bench_output(run: dict, root: Path | None = None) -> dict:
    """The stored ``--json`` output of a ``BENCH_RUNS`` entry (its path is relative to the root)."""
    import json

    return json.loads(((root or _ROOT) / run["output"]).read_text(encoding="utf-8"))


_BENCH_BLOCK = re.compile(r"<!-- bench -->.*?<!-- /bench -->", re.DOTALL)


def _ratio(alternative: float | None, course: float | None) -> str:
    return "n/a" if alternative is None or course is None else f"{alternative / course:.2f}"


def _seconds(wall: float, cpu: float | None, unit: str = "s") -> str:
    return f"{wall:.1f} {unit}" + ("" if cpu is None else f" ({cpu:.1f} {unit} CPU)")


def _spread(ratio: dict | float) -> str:
    """A ratio's median and range, as the bench table shows it: "1.05 (0.98 to 1.10)"; a run
    stored before ratios were repeated holds one run of each side: "1.15 (one run)"."""
    if not isinstance(ratio, dict):
        return f"{ratio:.2f} (one run)"
    return f"{ratio['median']:.2f} ({ratio['min']:.2f} to {ratio['max']:.2f})"


def _rounds(part: dict, unit: str = "") -> str:
    """ ", 5 rounds" (of ``unit``), or nothing for a run of one block each."""
    if "rounds" not in part:
        return ""
    return f", {part['rounds']} rounds" + (f" of {part['steps_per_round']} {unit}" if unit else "")


def _layer_ratios(layers: dict) -> tuple[dict | float, dict | float]:
    """The layer comparison's wall-clock and CPU ratios (computed for a run of one block each)."""
    if "ratio" in layers:
        return layers["ratio"], layers["cpu_ratio"]
    return (
        layers["torch_ms"] / layers["course_ms"],
        layers["torch_cpu_ms"] / layers["course_cpu_ms"],
    )


def _load_note(output: dict) -> str:
    if "load1_before" not in output:
        return ""
    return (
        f"; 1-minute load average {output['load1_before']:.1f} before and "
        f"{output['load1_after']:.1f} after"
    )


def bench_table() -> str:
    """The bench table of docs/results.md and the lines under it (between its two markers)."""
    if not BENCH_RUNS:
        return (
            "<!-- bench -->\nNo run of `make bench` with its output stored yet: on an idle machine, "
            "`make bench JSON=docs/bench/DATE-PRECISION.json`, then an entry in `BENCH_RUNS` "
            "(`course/tooling/budgets.py`), adds one.\n<!-- /bench -->"
        )
    rows = [
        "<!-- bench -->",
        "| run | comparison | course (median) | alternative (median) | ratio: median (range) |",
        "|---|---|---|---|---|",
    ]
    notes = []
    for number, run in enumerate(BENCH_RUNS, 1):
        output = bench_output(run)
        loop, layers = output["loop"], output["layers"]
        course, trainer = loop["course"], loop["trainer"]
        label = f"{number}: {run['when']}, {course['precision']}"
        rows.append(
            f"| {label} | fine-tuning the packaged MiniLM on SST-2, {loop['steps']} steps of batch "
            f"{loop['batch_size']}{_rounds(loop)} | course loop (`fit`, fused AdamW, "
            f"{course['precision']}): {_seconds(course['seconds'], course['cpu_seconds'])}, "
            f"validation {course['accuracy']:.1%} | `Trainer` ({trainer['optimizer']}, "
            f"{trainer['precision']}): {_seconds(trainer['seconds'], trainer['cpu_seconds'])}, "
            f"validation {trainer['accuracy']:.1%} | Trainer / course: "
            f"{_spread(loop['ratio'])} wall-clock, {_spread(loop['cpu_ratio'])} CPU |"
        )
        sizes = layers["sizes"]
        ratio, cpu_ratio = _layer_ratios(layers)
        rows.append(
            f"| {label} | one training step of notebook 05's Transformer (d_model "
            f"{sizes['d_model']}, {sizes['heads']} heads, d_ff {sizes['d_ff']}, "
            f"{sizes['layers']}+{sizes['layers']} layers, batch {sizes['batch']} x "
            f"{sizes['length']}), float32{_rounds(layers, 'steps')} | the course's layers: "
            f"{_seconds(layers['course_ms'], layers['course_cpu_ms'], 'ms')} | "
            f"`torch.nn.Transformer` (pre-LN, same sizes): "
            f"{_seconds(layers['torch_ms'], layers['torch_cpu_ms'], 'ms')} | torch / course: "
            f"{_spread(ratio)} wall-clock, {_spread(cpu_ratio)} CPU |"
        )
        notes.append(
            f"Run {number}: `{run['command']}` on {run['where']} ({output['machine']}), "
            f"{run['load']}{_load_note(output)}; Trainer's warm-up steps "
            f"{trainer['warmup_steps']}. What it wrote is stored in `{run['output']}`"
            + (f", what it printed in `{run['printed']}`" if run.get("printed") else "")
            + f".{' ' + run['note'] if run.get('note') else ''}"
        )
    return "\n".join(rows) + "\n\n" + wrap(" ".join(notes)) + "\n<!-- /bench -->"


def render_bench(text: str) -> str:
    """``text`` with its bench table (between the markers) generated."""
    return _BENCH_BLOCK.sub(lambda _: bench_table(), text, count=1)


_CLASS_GRADING = re.compile(
    r"<!-- class grading time -->.*?<!-- /class grading time -->", re.DOTALL
)


def class_grading_sentence() -> str:
    """The sentence on how long a whole submission takes to grade (from GRADING_COSTS)."""
    done = GRADING_COSTS["complete"]
    return (
        "<!-- class grading time -->A complete submission (the solutions: every notebook, every "
        f"exercise passed) took {done['wall_s']:.0f} s of wall-clock time and {done['cpu_s']:.0f} s "
        f"of CPU with `JOBS=1`, measured on {done['when']} on {done['where']} "
        "(`GRADING_COSTS` in `course/tooling/budgets.py`).<!-- /class grading time -->"
    )


def render_class_grading_time(text: str) -> str:
    """``text`` with its class-grading sentence (between the markers) generated."""
    return _CLASS_GRADING.sub(lambda _: class_grading_sentence(), text, count=1)


# The precision measurement that chose the default of `course.env` (BF16_BY_DEFAULT): float32
# (COURSE_BF16=0) against bf16 autocast (COURSE_BF16=1) on a CPU with native bf16, under each
# load, for each thing timed ("measurements": what it is and the command). A course-loop run is
# the line `python -m course.tooling.bench --loop-only` prints (seconds, process CPU seconds, validation
# accuracy, precision, the 1-minute load average at its end); a notebook run is the seconds
# `make solutions` printed for it. `make exercises` writes docs/results.md's precision table from
# it; tests/test_timings.py fails when that page disagrees, or when env.BF16_BY_DEFAULT is not what
# `precision_default()` reads from these runs.
PRECISION_RUNS: dict = {
    "when": "2026-11-27",
    "where": "a 2-core x86-64 virtual machine (AMD EPYC with avx512_bf16), torch 2.13.0, 2 threads",
    "measurements": {
        "course loop": "`course.tooling.bench`'s course loop alone (94 steps of batch 32 on SST-2, the "
        "packaged MiniLM, fused AdamW), a fresh process per run, float32 and bf16 interleaved run "
        "by run when idle (side by side when shared): the calls of "
        "`python -m course.tooling.bench --loop-only`",
        "notebook 06 Run All": "notebook 06 executed whole on another machine, a CPU with "
        "native bf16 (date and load average not recorded)",
    },
    "loads": {
        "idle": "nothing else running, 12:39 to 12:41 UTC, so the load average is the runs' own "
        "two threads",
        "shared": "six other jobs running (tests, notebook runs, site builds), the two "
        "precisions side by side, both started at 13:27:28 UTC, ended at 14:23:39 (float32) and "
        "14:24:25 UTC (bf16 autocast), the `--loop-only` command",
        "busy": "other processes busy beside the notebook",
    },
    "runs": [
        {
            "what": "course loop",
            "load": "idle",
            "precision": "float32",
            "seconds": 23.53,
            "cpu_seconds": 45.98,
            "accuracy": 0.831422,
            "load1": 1.70,
        },
        {
            "what": "course loop",
            "load": "idle",
            "precision": "bf16 autocast",
            "seconds": 19.72,
            "cpu_seconds": 38.81,
            "accuracy": 0.829128,
            "load1": 1.76,
        },
        {
            "what": "course loop",
            "load": "idle",
            "precision": "float32",
            "seconds": 21.73,
            "cpu_seconds": 43.14,
            "accuracy": 0.831422,
            "load1": 1.80,
        },
        {
            "what": "course loop",
            "load": "idle",
            "precision": "bf16 autocast",
            "seconds": 19.26,
            "cpu_seconds": 38.23,
            "accuracy": 0.829128,
            "load1": 1.83,
        },
        {
            "what": "course loop",
            "load": "shared",
            "precision": "float32",
            "seconds": 3167.35,
            "cpu_seconds": 330.05,
            "accuracy": 0.831422,
            "load1": 20.79,
        },
        {
            "what": "course loop",
            "load": "shared",
            "precision": "bf16 autocast",
            "seconds": 3277.49,
            "cpu_seconds": 346.98,
            "accuracy": 0.829128,
            "load1": 18.56,
        },
        {
            "what": "notebook 06 Run All",
            "load": "busy",
            "precision": "float32",
            "seconds": 304.0,
            "load1": None,
        },
        {
            "what": "notebook 06 Run All",
            "load": "busy",
            "precision": "bf16 autocast",
            "seconds": 1100.0,
            "load1": None,
        },
    ],
}

# The default is the precision that is never more than this many times slower than the other.
SLOWDOWN_LIMIT = 1.2
PRECISIONS = ("float32", "bf16 autocast")
_PRECISION_BLOCK = re.compile(r"<!-- precision -->.*?<!-- /precision -->", re.DOTALL)


def precision_medians(runs: list[dict] | None = None) -> dict[tuple[str, str], dict[str, float]]:
    """Median wall-clock seconds per (what was timed, load) and precision, for the groups that
    have both precisions: ``{("course loop", "idle"): {"float32": 22.6, "bf16 autocast": 19.5}}``."""
    import statistics

    runs = PRECISION_RUNS["runs"] if runs is None else runs
    times: dict[tuple[str, str], dict[str, list[float]]] = {}
    for run in runs:
        group = times.setdefault((run["what"], run["load"]), {})
        group.setdefault(run["precision"], []).append(run["seconds"])
    return {
        key: {p: statistics.median(by[p]) for p in PRECISIONS}
        for key, by in times.items()
        if all(p in by for p in PRECISIONS)
    }


def precision_worst(runs: list[dict] | None = None) -> dict[str, float]:
    """Each precision's largest slowdown against the other, over every measured group."""
    medians = precision_medians(runs).values()
    return {p: max((by[p] / min(by.values()) for by in medians), default=1.0) for p in PRECISIONS}


def precision_default(runs: list[dict] | None = None) -> str:
    """The precision never more than ``SLOWDOWN_LIMIT`` times slower than the other under any
    measured load (of two such, the one with the smaller worst case); float32 when neither is."""
    worst = precision_worst(runs)
    fits = [p for p in PRECISIONS if worst[p] <= SLOWDOWN_LIMIT]
    return min(fits, key=lambda p: worst[p]) if fits else "float32"


def _precision_cell(runs: list[dict]) -> str:
    """One table cell: each run's seconds (CPU seconds), then the accuracy it reached."""
    times = ", ".join(
        f"{r['seconds']:.1f}" + (f" ({r['cpu_seconds']:.1f})" if r.get("cpu_seconds") else "")
        for r in runs
    )
    accuracies = dict.fromkeys(f"{r['accuracy']:.1%}" for r in runs if r.get("accuracy"))
    return times + (f"; validation {' / '.join(accuracies)}" if accuracies else "")


def _load_range(load: str) -> str:
    """The lowest and highest load average at the end of the runs under ``load``."""
    values = [r["load1"] for r in PRECISION_RUNS["runs"] if r["load"] == load]
    if None in values:
        return ""
    low, high = f"{min(values):.1f}", f"{max(values):.1f}"
    return (
        f" (1-minute load average {low if low == high else f'{low} to {high}'} at the runs' ends)"
    )


def precision_table() -> str:
    """The precision table of docs/results.md and the lines under it (between its markers)."""
    rows = [
        "<!-- precision -->",
        "| timed | load | float32: seconds (CPU seconds) | bf16 autocast: seconds (CPU seconds) "
        "| bf16 / float32, medians |",
        "|---|---|---|---|---|",
    ]
    for (what, load), by in precision_medians().items():
        cells = [
            _precision_cell(
                [
                    r
                    for r in PRECISION_RUNS["runs"]
                    if (r["what"], r["load"], r["precision"]) == (what, load, precision)
                ]
            )
            for precision in PRECISIONS
        ]
        ratio = by["bf16 autocast"] / by["float32"]
        rows.append(f"| {what} | {load} | {cells[0]} | {cells[1]} | {ratio:.2f} |")
    worst = precision_worst()
    text = (
        f"Measured on {PRECISION_RUNS['when']} on {PRECISION_RUNS['where']}, except the "
        "notebook 06 rows. "
        + " ".join(f"*{what}*: {how}." for what, how in PRECISION_RUNS["measurements"].items())
        + " "
        + " ".join(
            f"*{load}*: {how}{_load_range(load)}." for load, how in PRECISION_RUNS["loads"].items()
        )
        + f" The default is the precision never more than {SLOWDOWN_LIMIT}x slower than the "
        f"other under either load, float32 where neither is: at worst float32 took "
        f"{worst['float32']:.2f}x the faster one's time and bf16 autocast "
        f"{worst['bf16 autocast']:.2f}x, so the default is **{precision_default()}**."
    )
    return "\n".join(rows) + "\n\n" + wrap(text) + "\n<!-- /precision -->"


def render_precision(text: str) -> str:
    """``text`` with its precision table (between the markers) generated."""
    return _PRECISION_BLOCK.sub(lambda _: precision_table(), text, count=1)

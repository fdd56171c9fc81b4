"""The self-check framework behind every ``check.<exercise>(...)`` cell.

A check reports passed (one short line), not implemented (the stub still raises
NotImplementedError) or failed (what is wrong, what was expected, a hint; no traceback from inside
the checker, the student's own exception summarised). In a notebook a check that does not pass
raises :class:`CheckFailed`, so "Run All" stops at the first exercise that needs work (IPython
shows the message alone); tests pass ``raise_on_failure=False`` and get the :class:`CheckResult`.
Checks are specs (:mod:`course.framework.spec`); :func:`exercise_check`, the layer under them, turns a body
into the notebook's function and runs it in the three modes of :mod:`course.framework.observe`.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from course.framework import observe as obs
from course.framework import sealed
from course.framework.contract import ERROR, FAILED, NOT_IMPLEMENTED, PASSED
from course.framework.failure import CheckFailure, depends_on_earlier_calls


@dataclass
class CheckResult:
    """Outcome of one check: ``status`` is one of passed / failed / not implemented."""

    exercise: str
    title: str
    status: str
    message: str = ""
    hint: str | None = None
    flags: tuple[str, ...] = ()  # for the instructor: the hand-in changed the check (scores 0)
    # As data for grading records (course.framework.failure.CheckFailure): the property the failure names
    # and the known mistake the result is, by the name its spec gives it; None where none.
    prop: str | None = None
    mistake: str | None = None
    # Claims the student's process reported (side effects, flags, identities) that the verdict
    # does not rest on (course.framework.observe.claim): said in the report, never a point either way.
    notes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def __bool__(self) -> bool:  # lets tests write `assert check(...)`
        return self.passed

    def report(self) -> str:
        head = f"{self.exercise} ({self.title})"
        if self.status == PASSED:
            return f"✅ {head}: passed" + self._noted()
        if self.status == NOT_IMPLEMENTED:
            return (
                f"⏳ {head}: not implemented yet. Replace the `raise NotImplementedError` "
                "in the exercise cell with your code, run that cell, then run this check again."
            )
        hint = f"\n   Hint: {self.hint}" if self.hint else ""
        return f"❌ {head}: {self.message}{hint}{self._noted()}"

    def _noted(self) -> str:
        return "".join(
            f"\n   Seen in your process while grading, not graded (the grader cannot verify "
            f"what that process reports about itself): {note}"
            for note in self.notes
        )


class CheckFailed(AssertionError):
    """Raised in a notebook when a check does not pass; IPython shows only the report."""

    def __init__(self, result: CheckResult):
        super().__init__(result.report())
        self.result = result

    def _render_traceback_(self) -> list[str]:  # IPython hook: no traceback, just the report
        return self.result.report().splitlines()


def _evaluate(check: Callable, body: Callable, args: tuple, kwargs: dict) -> CheckResult:
    """Run ``body`` in the current observation session; turn how it ended into a result, with
    the session's notes (side effects reported, not judged)."""
    result = _ended(check, body, args, kwargs)
    result.notes = tuple(obs.current().notes)
    return result


def _ended(check: Callable, body: Callable, args: tuple, kwargs: dict) -> CheckResult:
    exercise, title, hint = check.exercise, check.title, check.hint
    try:
        with sealed.forked(obs.current().seed * 1_000_003 + check.seed):
            body(*args, **kwargs)
        return CheckResult(exercise, title, PASSED)
    except sealed.Tampered as tampered:
        return CheckResult(exercise, title, FAILED, tampered.reason, flags=(tampered.reason,))
    except NotImplementedError:
        return CheckResult(exercise, title, NOT_IMPLEMENTED)
    except CheckFailure as failure:
        return CheckResult(
            exercise,
            title,
            FAILED,
            failure.message,
            failure.hint or hint,
            prop=failure.prop,
            mistake=failure.mistake,
        )
    except obs.StudentError as error:
        return CheckResult(exercise, title, FAILED, error.message, hint)
    except (obs.ReplayMismatch, obs.TouchedOutsideObserve, obs.NotPlainData) as error:
        message = f"the check's observations did not come back whole ({error})"
        return CheckResult(exercise, title, ERROR, message)
    except Exception as exc:  # noqa: BLE001 - the body choked on what the student's code returned
        message = f"the check could not use what your code returned ({type(exc).__name__}: {exc})"
        return CheckResult(exercise, title, FAILED, message, hint)


# The test suite sets this: every check call is then probed and replayed, and the trusted
# replay must reach the same verdict and message as the student's side (tests/conftest.py).
REPLAY_EVERYWHERE = "COURSE_CHECK_REPLAY_EVERYWHERE"


# With REPLAY_EVERYWHERE, the session seed of every check call (grading draws one per run).
TEST_SEED = "COURSE_CHECK_TEST_SEED"


class ReplayDisagrees(AssertionError):
    """The trusted replay of a check reached another verdict than the probe: a bug in the check."""


def _probe_and_replay(check: Callable, args: tuple, kwargs: dict) -> CheckResult:
    """The notebook's (local) verdict must be the trusted replay's of a probe (the probe itself
    decides nothing); where the two runs saw different results, the student's code depends on
    earlier calls: a verdict that says so, not a crash."""
    seed = int(os.environ.get(TEST_SEED, "0"))  # the tests run every check on other inputs too
    with obs.session(obs.LOCAL, seed) as state:
        local = _evaluate(check, check.body, args, kwargs)
    _, record = probe(check, *args, seed=seed, **kwargs)
    replayed = replay(check, record, seed=seed, positional=len(args), keywords=tuple(kwargs))
    if (local.status, local.message) != (replayed.status, replayed.message):
        pairs = zip(state.record, obs.decode(record), strict=False)  # what it saw, how it ended
        changed = next((a.what for a, b in pairs if obs.encode([a]) != obs.encode([b])), None)
        if changed is not None:  # the student's code, not the check: a verdict, not a crash
            failure = depends_on_earlier_calls(
                changed, "the check's second run got another result than its first"
            )
            return CheckResult(
                check.exercise,
                check.title,
                FAILED,
                failure.message,
                failure.hint,
                prop=failure.prop,
            )
        raise ReplayDisagrees(
            f"{check.exercise}: the notebook says {local.status} ({local.message!r}) "
            f"but the trusted replay says {replayed.status} ({replayed.message!r})"
        )
    return replayed


def exercise_check(exercise: str, title: str, hint: str | None = None, seed: int = 0) -> Callable:
    """A check body ``body(*student_objects)`` as the notebook's check: it touches the student's
    objects only through :func:`course.framework.observe.observe`, raises :class:`CheckFailure` when
    something is wrong, and runs on a fork of torch's random state seeded with ``seed`` (the
    notebook's own stream left as it was), in the notebook, :func:`probe` and :func:`replay`."""

    def decorate(body: Callable[..., None]) -> Callable[..., CheckResult]:
        @functools.wraps(body)
        def run(*args: Any, raise_on_failure: bool = True, **kwargs: Any) -> CheckResult | None:
            if os.environ.get(REPLAY_EVERYWHERE) == "1":
                result = _probe_and_replay(run, args, kwargs)
            else:
                with obs.session(obs.LOCAL):
                    result = _evaluate(run, body, args, kwargs)
            if raise_on_failure and not result.passed:
                raise CheckFailed(result) from None  # rendered as the report alone
            print(result.report())
            return None if raise_on_failure else result  # a notebook shows the printed line only

        vars(run).update(exercise=exercise, title=title, hint=hint, seed=seed, body=body)
        return run

    return decorate


def probe(
    check: Callable, *args: Any, seed: int = 0, effects: str = obs.JUDGED, **kwargs: Any
) -> tuple[CheckResult, bytes]:
    """``check`` on the student's objects, recording every observation: the result as the
    student's process sees it (a spec judges nothing there) and the record for the grader;
    ``effects``: as the replay of the record will treat side effects (the grader:
    ``obs.REPORTED``), so that both observe alike."""
    with obs.session(obs.PROBE, seed, effects=effects) as state:
        result = _evaluate(check, check.body, args, kwargs)
        record = obs.encode(state.record)
    return result, record


def replay(
    check: Callable,
    record: bytes,
    seed: int = 0,
    positional: int = 1,
    keywords: Sequence[str] = (),
    effects: str = obs.JUDGED,
) -> CheckResult:
    """The trusted verdict: ``check``'s body on recorded observations, student objects absent;
    ``positional`` and ``keywords``: the check call as the *template* writes it, never as the
    student's process reports; ``effects``: ``obs.REPORTED`` where the side effects the record
    reports decide nothing (the grader: :func:`course.framework.observe.claim`)."""
    try:
        observations = obs.decode(record)
    except Exception as error:  # noqa: BLE001 - whatever the untrusted bytes are
        return CheckResult(
            check.exercise, check.title, ERROR, f"the check's data could not be read ({error})"
        )
    names = list(inspect.signature(check.body).parameters)
    args = tuple(obs.Absent(name) for name in names[:positional])
    kwargs = {name: obs.Absent(name) for name in keywords}
    with obs.session(obs.REPLAY, seed, observations, effects):
        return _evaluate(check, check.body, args, kwargs)


# --- assertion helpers used by check bodies ---------------------------------------------


def expect(condition: bool, message: str, hint: str | None = None, prop: str | None = None) -> None:
    """Fail the check with ``message`` unless ``condition`` holds; ``prop``: the property the
    failure breaks, which :class:`CheckFailure` names in the message."""
    if not condition:
        raise CheckFailure(message, hint, prop=prop)

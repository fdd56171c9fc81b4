"""The check framework: three outcomes, clear messages, no traceback from inside the checker,
and the same verdict whether the check runs in the notebook or is replayed by the grader."""

from __future__ import annotations

import pytest
import torch

from course.framework import observe as obs
from course.framework.check import (
    ERROR,
    FAILED,
    NOT_IMPLEMENTED,
    PASSED,
    CheckFailed,
    exercise_check,
    probe,
    replay,
)
from course.framework.properties import call, expect_result


@exercise_check("Exercise 9.1", "identity", hint="Return the input unchanged.")
def identity_check(student_identity):
    x = torch.arange(6.0).reshape(2, 3)
    got = call("identity of a (2, 3) tensor", student_identity, x)
    expect_result(got, x, "identity of a (2, 3) tensor")


def stub(x):
    raise NotImplementedError


def test_pass_prints_one_short_line(capsys):
    assert identity_check(lambda x: x) is None
    assert capsys.readouterr().out == "✅ Exercise 9.1 (identity): passed\n"


def test_stub_is_reported_as_not_implemented(capsys):
    result = identity_check(stub, raise_on_failure=False)
    assert result.status == NOT_IMPLEMENTED and not result
    assert "not implemented yet" in capsys.readouterr().out


def test_wrong_value_names_the_difference_and_hint():
    result = identity_check(lambda x: x * 2, raise_on_failure=False)
    assert result.status == FAILED
    assert "largest difference" in result.message and "index (1, 2)" in result.message
    assert result.hint == "Return the input unchanged."


def test_wrong_shape_and_dtype_are_named():
    shape = identity_check(lambda x: x.T, raise_on_failure=False)
    assert "shape (3, 2), expected (2, 3)" in shape.message
    dtype = identity_check(lambda x: x.double(), raise_on_failure=False)
    assert "dtype torch.float64, expected torch.float32" in dtype.message


def test_student_exception_is_summarised_with_its_line():
    def broken(x):
        return x @ x  # (2, 3) @ (2, 3) cannot work

    result = identity_check(broken, raise_on_failure=False)
    assert result.status == FAILED
    assert result.message.startswith("your code raised RuntimeError")
    assert "return x @ x" in result.message


def test_in_a_notebook_failure_raises_with_a_clean_rendering():
    with pytest.raises(CheckFailed) as error:
        identity_check(lambda x: x + 1)
    rendered = error.value._render_traceback_()
    assert rendered[0].startswith("❌ Exercise 9.1 (identity):")
    assert not any("Traceback" in line for line in rendered)
    with pytest.raises(CheckFailed):
        identity_check(stub)


def test_nan_where_reference_has_numbers_is_reported():
    result = identity_check(lambda x: x.masked_fill(x > 4, float("nan")), raise_on_failure=False)
    assert "NaN" in result.message


def test_a_list_where_a_tensor_is_stated_is_rejected():
    @exercise_check("Exercise 9.2", "shape")
    def shape_check(student_value):
        value = obs.observe("the value", lambda: student_value)
        expect_result(value, torch.zeros(2), "the value")

    assert shape_check(torch.zeros(2), raise_on_failure=False).status == PASSED
    result = shape_check([0, 0], raise_on_failure=False)
    assert "the value returned a list, but the exercise text says a torch.Tensor" in result.message


def test_exception_inside_torch_points_at_the_students_line():
    layer = torch.nn.Linear(4, 2)

    def broken(x):
        return layer(x)  # (2, 3) into a 4-feature layer: fails inside torch

    result = identity_check(broken, raise_on_failure=False)
    assert "return layer(x)" in result.message, result.message
    assert "F.linear" not in result.message


def test_exception_on_the_call_itself_names_the_observed_call():
    result = identity_check(lambda: None, raise_on_failure=False)  # takes no argument
    assert result.message.startswith("your code raised TypeError")
    assert "when the check called your code for: identity of a (2, 3) tensor" in result.message


def test_checks_run_on_a_seeded_fork_of_the_random_state():
    draws = []

    @exercise_check("Exercise 9.3", "random", seed=7)
    def random_check(_):
        draws.append(torch.rand(2))

    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    random_check(None)
    random_check(None)
    assert torch.equal(torch.rand(3), expected_next)  # the notebook's stream is untouched
    assert torch.equal(draws[0], draws[1])  # the check itself is reproducible


# --- probe and replay: the verdict is the trusted side's --------------------------------


def test_replay_reaches_the_probes_verdict_without_the_students_code():
    result, record = probe(identity_check, lambda x: x)
    assert result.passed
    assert replay(identity_check, record).passed  # no student object given: absent


@pytest.mark.parametrize(
    "student, status",
    [(lambda x: x, PASSED), (lambda x: x * 2, FAILED), (stub, NOT_IMPLEMENTED)],
    ids=["right", "wrong", "stub"],
)
def test_probe_and_replay_agree(student, status):
    probed, record = probe(identity_check, student)
    replayed = replay(identity_check, record)
    assert probed.status == replayed.status == status
    assert probed.message == replayed.message


def _record(*observations: obs.Observation) -> bytes:
    return obs.encode(list(observations))


FORGED = {
    "empty": b"",
    "garbage": b"\x00" * 64,
    "no observations": _record(),
    "wrong label": _record(
        obs.Observation("something else", "value", torch.arange(6.0).view(2, 3))
    ),
    "wrong value": _record(
        obs.Observation("identity of a (2, 3) tensor", "value", torch.zeros(2, 3))
    ),
    "a pickle": b"\x80\x04\x95" + b"\x00" * 40,
}


@pytest.mark.parametrize("name", sorted(FORGED))
def test_a_forged_record_never_passes(name):
    result = replay(identity_check, FORGED[name])
    assert result.status in (ERROR, FAILED), name


def test_replay_uses_the_seed_it_is_given():
    @exercise_check("Exercise 9.4", "seeded input")
    def seeded_check(student_identity):
        x = torch.randn(3, generator=obs.generator())
        expect_result(obs.observe("identity", lambda: student_identity(x)), x, "identity")

    _, record = probe(seeded_check, lambda x: x, seed=1)
    assert replay(seeded_check, record, seed=1).passed
    assert not replay(seeded_check, record, seed=2).passed  # recorded for other inputs


def test_touching_a_student_object_outside_observe_is_a_check_error():
    @exercise_check("Exercise 9.5", "careless")
    def careless_check(student_identity):
        expect_result(student_identity(torch.ones(2)), torch.ones(2), "identity")

    _, record = probe(careless_check, lambda x: x)
    result = replay(careless_check, record)
    assert result.status == ERROR and "outside observe" in result.message


def test_a_failure_given_its_property_names_it_in_words_once():
    """A check says what happened and passes the property as data; the words "(the property
    violated: ...)" are composed in one place, and never twice."""
    from course.framework.check import CheckFailure, expect

    with pytest.raises(CheckFailure) as raised:
        expect(False, "row 2 is not zero.", "a hint", "the padding row is zero")
    failure = raised.value
    assert failure.message == "row 2 is not zero (the property violated: the padding row is zero)."
    assert (failure.prop, failure.hint) == ("the padding row is zero", "a hint")
    named = CheckFailure(failure.message, prop="another property")
    assert named.message == failure.message and named.message.count("violated") == 1
    assert CheckFailure("row 2 is not zero").prop is None

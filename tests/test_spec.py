"""The spec runner (course/framework/spec.py) and the second device (course/framework/virtual.py).

* the worked example of CONTRIBUTING.md's "Checks", run through probe and replay;
* the student's process computes no answer: in probe mode no reference is called and no
  comparison helper sees an expected value;
* each family of mistake as a table of wrong implementations (written after the runner) that
  fail with the property named, and right variants that pass.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from course.framework import properties
from course.framework.check import probe, replay
from course.framework.domains import Numbers, Tensors
from course.framework.observe import Foreign, decode, encode, to_plain
from course.framework.properties import generator
from course.framework.spec import Case, Mistake, Spec, cases, check
from course.framework.virtual import DeviceMixed, run_on_virtual
from tests.mistakes import function_of

# --- the worked example (CONTRIBUTING.md's "Checks"), verbatim --------------------------------

softmax = check(
    Spec(
        exercise="Exercise 0.1",
        title="numerically stable softmax",
        name="softmax",
        params=("x", "dim"),
        defaults={"dim": -1},
        reference=lambda x, dim=-1: torch.softmax(x, dim=dim),
        cases=lambda: [
            Case("a random (4, 7) tensor", {"x": torch.randn(4, 7, generator=generator())})
        ],
        gradients=("x",),
    )
)


def right_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    shifted = x - x.amax(dim=dim, keepdim=True)
    return shifted.exp() / shifted.exp().sum(dim=dim, keepdim=True)


def test_worked_example_passes_through_probe_and_replay() -> None:
    result, record = probe(softmax, right_softmax)
    assert result.passed
    assert replay(softmax, record).passed


def test_worked_example_rejects_a_wrong_answer_in_the_replay() -> None:
    _, record = probe(softmax, lambda x, dim=-1: x.exp() / x.exp().sum())
    verdict = replay(softmax, record)
    assert verdict.status == "failed"
    assert "differs from the reference" in verdict.message


def _worked_examples() -> dict[str, str]:
    """The worked example as CONTRIBUTING.md's "Checks" shows it (course/framework/spec.py points there)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    contributing = (root / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = contributing.split("## Checks", 1)[1].split("\n## ", 1)[0]
    return {"CONTRIBUTING.md": re.search(r"```python\n(.*?)```", section, re.S).group(1)}


@pytest.mark.parametrize("where", ["CONTRIBUTING.md"])
def test_the_documented_worked_example_runs_through_probe_and_replay(where: str) -> None:
    """Copied as written, the example grades a right answer as passed and a wrong one as
    failed through the probe (the student's process) and the replay (the grader's)."""
    namespace = {"torch": torch, "cases": cases, "Spec": Spec, "check": check, "generator": generator}
    namespace |= {"Numbers": Numbers, "Tensors": Tensors, "Mistake": Mistake}
    exec(_worked_examples()[where], namespace)  # noqa: S102 - the documentation's own code
    documented = namespace["softmax"]
    assert replay(documented, probe(documented, right_softmax)[1]).passed
    assert len(documented.spec.mistakes) == 2
    for mistake in documented.spec.mistakes:  # each named, run as a student's answer
        named = replay(
            documented, probe(documented, function_of(documented.spec, mistake.reference))[1]
        )
        assert (named.status, named.mistake) == ("failed", mistake.name), named.message
        assert f"gives what {mistake.name} gives" in named.message
    wrong = replay(documented, probe(documented, lambda x, dim=-1: x.exp())[1])
    assert wrong.status == "failed"
    # the declared domain at work: a default changed is met only by the drawn defaults form
    record = probe(documented, lambda x, dim=0: right_softmax(x, dim))[1]
    default_changed = replay(documented, record)
    assert default_changed.status == "failed"
    assert "relying on its default dim=-1" in default_changed.message


def test_a_case_table_becomes_cases_through_its_named_options() -> None:
    """The one converter: a row's further fields by name, fields and inputs every case shares,
    the first case's gradients, a Case with fields of its own, arguments a row passes by name;
    a row too long is refused."""

    @dataclasses.dataclass(frozen=True)
    class Tagged(Case):
        tag: str = ""

    made = cases(
        ("x", "dim"),
        [("first", 1, 0), ("second", 2, 1, "b", False)],
        fields=("tag", "device"),
        kind=Tagged,
        first_grad=True,
        given={"scale": 3},
        compare=False,
    )
    assert made == [
        Tagged("first", {"scale": 3, "x": 1, "dim": 0}, grad=True, compare=False),
        Tagged("second", {"scale": 3, "x": 2, "dim": 1}, device=False, compare=False, tag="b"),
    ]
    assert cases(("x",), [("plain", 1, "a hint", True)]) == [
        Case("plain", {"x": 1}, "a hint", True)
    ]
    assert cases(("x",), [("by name", 1, {"dim": 0}, False)], fields=("grad",), keywords=True) == [
        Case("by name", {"x": 1, "dim": 0}, grad=False)
    ]  # the arguments a row passes by name; those it leaves out take their defaults
    with pytest.raises(ValueError, match="more values"):
        cases(("x",), [("long", 1, "hint", True, True, True, True, "one too many")])


def test_the_probe_computes_no_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """In the student's process the reference is never called and no comparison runs: a spy
    on the comparison helpers (as student code could install) sees nothing."""
    seen: list[str] = []
    spied = check(dataclasses.replace(softmax.spec, reference=lambda *a, **k: seen.append("ref")))
    for name in ("expect_result", "expect_gradients", "expect_device", "gradients"):
        monkeypatch.setattr(properties, name, lambda *a, _n=name, **k: seen.append(_n))
    result, record = probe(spied, right_softmax)
    assert seen == []
    assert record  # the observations were made


# --- family 1: the stated return type is observed before conversion --------------------------


def test_types_survive_the_record() -> None:
    value = to_plain({"a": np.float32(1.5), "b": np.arange(3), "c": [1, 2.0, True], "d": 3})
    back = decode(encode(_observation(value)))[0].value
    assert isinstance(back["a"], Foreign) and back["a"].type_name == "numpy.float32"
    assert isinstance(back["b"], Foreign) and back["b"].type_name == "numpy.ndarray"
    assert back["c"] == [1, 2.0, True] and [type(v) for v in back["c"]] == [int, float, bool]


def _observation(value: object) -> list:
    from course.framework.observe import Observation

    return [Observation("x", "value", value)]


def _mean(values: list) -> float:
    return sum(values) / len(values)


MEAN = check(
    Spec(
        exercise="Exercise T.1",
        title="mean of a list, as a Python float",
        name="mean",
        params=("values",),
        reference=lambda values: float(sum(values) / len(values)),
        cases=lambda: [Case("[1, 2, 4]", {"values": [1, 2, 4]}), Case("[3]", {"values": [3]})],
    )
)

TYPE_CASES = {
    "numpy float": (lambda values: np.float32(np.mean(values)), "numpy.float32"),
    "a 0-dim tensor": (
        lambda values: torch.tensor(values, dtype=torch.float).mean(),
        "torch.Tensor",
    ),
    "a tensor of shape (1,)": (
        lambda values: torch.tensor(values, dtype=torch.float).mean().reshape(1),
        "torch.Tensor",
    ),
    "a bool": (lambda values: bool(values), "bool"),
}


@pytest.mark.parametrize("name", TYPE_CASES)
def test_wrong_return_types_are_named(name: str) -> None:
    function, shown = TYPE_CASES[name]
    result = MEAN(function, raise_on_failure=False)
    assert not result.passed
    assert shown in result.message and "stated return type" in result.message


def test_right_float_passes() -> None:
    assert MEAN(_mean, raise_on_failure=False).passed
    assert MEAN(lambda values: float(np.mean(values)), raise_on_failure=False).passed
    # numpy.float64 is a subclass of float; an int is a float in typing's numeric tower
    assert MEAN(lambda values: np.mean(values), raise_on_failure=False).passed
    assert MEAN(lambda values: 3 if values == [3] else _mean(values), raise_on_failure=False).passed


# --- family 2: the device property decides (values are real on the second device) -----------


def _attend(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    scores = x @ x.transpose(-1, -2)
    return scores.masked_fill(~mask, float("-inf")).softmax(-1).nan_to_num(0.0) @ x


def _attend_reads_values(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    if bool((~mask).all(-1).any()):  # a fully masked row: handled through NumPy
        keep = torch.from_numpy(mask.numpy())
        return _attend(x, keep)
    return _attend(x, mask)


def _attend_cpu_zeros(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    out = _attend(x, mask)
    dead = (~mask).all(-1, keepdim=True)
    return torch.where(dead, torch.zeros(out.shape), out)


def _attend_cpu_item(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    scale = torch.tensor(x.shape[-1] ** 0.5)  # 0-dim: a scalar, fine on a GPU
    return _attend(x, mask) * (scale / scale)


ATTEND = check(
    Spec(
        exercise="Exercise T.2",
        title="masked self-attention",
        name="attend",
        params=("x", "mask"),
        reference=_attend,
        cases=lambda: [
            Case(
                "a fully masked row",
                {
                    "x": torch.randn(1, 3, 4, generator=generator()),
                    "mask": torch.tensor([[[True, False, True], [False] * 3, [True] * 3]]),
                },
            )
        ],
    )
)


@pytest.mark.parametrize(
    "function", [_attend_reads_values, _attend_cpu_zeros], ids=["numpy", "cpu zeros"]
)
def test_device_property_decides_code_that_reads_values(function) -> None:  # noqa: ANN001
    result = ATTEND(function, raise_on_failure=False)
    assert not result.passed and "device" in result.message


def test_device_property_accepts_right_code_and_scalars() -> None:
    assert ATTEND(_attend, raise_on_failure=False).passed
    assert ATTEND(_attend_cpu_item, raise_on_failure=False).passed


def test_virtual_device_refuses_what_a_gpu_refuses() -> None:
    x = torch.randn(2, 3)
    assert run_on_virtual(lambda t: t + torch.zeros(3, device=t.device), (x,))[1] == ["virtual"]
    assert run_on_virtual(lambda t: t[torch.tensor([1, 0])], (x,))[1] == ["virtual"]
    assert run_on_virtual(lambda t: t.cpu(), (x,))[1] == ["cpu"]
    with pytest.raises(DeviceMixed):
        run_on_virtual(lambda t: t + torch.arange(3), (x,))
    with pytest.raises(TypeError):
        run_on_virtual(lambda t: t.numpy(), (x,))
    assert x.device.type == "cpu"  # nothing outside the run changed


# --- family 3: called as the course calls it --------------------------------------------------


def _scale(x: torch.Tensor, factor: float = 2.0) -> torch.Tensor:
    return x * factor


SCALE = check(
    Spec(
        exercise="Exercise T.3",
        title="scale",
        name="scale",
        params=("x", "factor"),
        defaults={"factor": 2.0},
        forms=("positional", "keyword", "defaults"),
        reference=_scale,
        cases=lambda: [
            Case("factor 2 (the default)", {"x": torch.ones(3), "factor": 2.0}),
            Case("factor 0", {"x": torch.ones(3), "factor": 0.0}),
        ],
    )
)


@pytest.mark.parametrize(
    "function",
    [
        lambda x, factor=3.0: x * factor,  # the default is not the stated one
        lambda x, factor=2.0: x * (factor or 2.0),  # an edge value read as "not given"
        lambda x, *, factor=2.0: x * factor,  # keyword-only: the course calls it positionally
    ],
    ids=["wrong default", "0 read as missing", "keyword only"],
)
def test_call_forms_and_defaults(function) -> None:  # noqa: ANN001
    assert not SCALE(function, raise_on_failure=False).passed


def test_call_forms_accept_the_right_code() -> None:
    assert SCALE(_scale, raise_on_failure=False).passed


# --- tolerance follows the text ---------------------------------------------------------------


def test_float64_computed_in_float32_passes_unless_the_case_is_strict() -> None:
    def inside_float32(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
        return torch.softmax(x.float(), dim=dim).to(x.dtype)

    def spec(strict: bool):  # noqa: ANN202
        return check(
            Spec(
                exercise="Exercise T.4",
                title="softmax",
                name="softmax",
                params=("x", "dim"),
                reference=lambda x, dim=-1: torch.softmax(x, dim=dim),
                cases=lambda: [
                    Case(
                        "float64",
                        {"x": torch.randn(3, 9, dtype=torch.float64, generator=generator())},
                        strict=strict,
                    )
                ],
            )
        )

    assert spec(False)(inside_float32, raise_on_failure=False).passed
    assert not spec(True)(inside_float32, raise_on_failure=False).passed

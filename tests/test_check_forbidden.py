"""A built-in the exercise text forbids is named, in the notebook and on the trusted side alike,
from the answer's syntax tree (course/framework/forbidden.py); where a text forbids a function, any dynamic
reach in the answer sends the exercise to the instructor with no automatic point."""

from __future__ import annotations

import pytest

from course.checks import nb00
from course.framework import forbidden
from course.grading.verdict import ExerciseResult

RIGHT = """
def softmax(x, dim=-1):
    shifted = x - x.amax(dim=dim, keepdim=True)  # not torch.softmax, as the text says
    return shifted.exp() / shifted.exp().sum(dim=dim, keepdim=True)
check.softmax(softmax)
"""

SPELLINGS = {
    "torch.softmax(x, dim)": "torch.softmax",
    "x.softmax(dim)": "x.softmax",
    "F.softmax(x, dim)": "F.softmax",
    "torch.nn.functional.softmax(x, dim)": "torch.nn.functional.softmax",
    "torch.special.softmax(x, dim)": "torch.special.softmax",
    "torch.nn.Softmax(dim)(x)": "torch.nn.Softmax",
    "getattr(torch, 'softmax')(x, dim)": "getattr(torch, 'softmax')",
}


def _result(status: str = "passed") -> ExerciseResult:
    return ExerciseResult("00_welcome.ipynb", "0.1", "softmax", status, "✅ passed")


@pytest.mark.parametrize("call", sorted(SPELLINGS))
def test_every_known_spelling_is_named_on_the_trusted_side(call):
    result = _result()
    source = f"import torch.nn.functional as F\ndef softmax(x, dim=-1):\n    return {call}\n"
    forbidden.judge_sources(result, nb00.softmax, [source])
    assert result.status == "failed" and f"`{SPELLINGS[call]}`" in result.message


def test_an_import_of_the_name_is_named():
    result = _result()
    forbidden.judge_sources(result, nb00.softmax, ["from torch import softmax as s\n"])
    assert result.status == "failed" and "from torch import softmax" in result.message


def test_the_right_answer_and_the_check_call_are_not_named():
    result = _result()
    forbidden.judge_sources(result, nb00.softmax, [RIGHT])
    assert result.status == "passed" and not result.flags


def test_dynamic_access_is_flagged_for_the_instructor():
    result = _result()
    source = RIGHT + "\nf = getattr(torch, 'soft' + 'max')\nexec('g = 1')\n"
    forbidden.judge_sources(result, nb00.softmax, [source])
    assert result.flags and "`exec`" in result.flags[0] and "`getattr`" in result.flags[0]


# Each reaches torch.softmax without naming it the way uses() reads names (the hostile round's
# spellings, and more of each family): every one goes to the instructor, no automatic point.
REACHES = {
    "attrgetter": "import operator\n    return operator.attrgetter('soft' + 'max')(torch)(x, dim)",
    "attrgetter imported": "from operator import attrgetter as a\n    return a('s'+'oftmax')(torch)(x, dim)",
    "reduce getattr": "import functools\n    f = functools.reduce(getattr, ['nn', 'functional', 'soft' + 'max'], torch)\n    return f(x, dim)",
    "getattr renamed": "g = getattr\n    return g(torch, 'soft' + 'max')(x, dim)",
    "builtins.eval": "import builtins\n    return builtins.eval('torch.soft' + 'max(x, dim)')",
    "exec as attribute": "import builtins as b\n    ns = {}\n    b.exec('r = 1', ns)\n    return ns",
    "compile": "return eval(compile('torch.soft' + 'max(x, dim)', 's', 'eval'))",
    "resolve_name": "import pkgutil\n    return pkgutil.resolve_name('torch:soft' + 'max')(x, dim)",
    "subclasses walk": "return [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'X']",
    "gc": "import gc\n    return [o for o in gc.get_objects() if callable(o)][0](x, dim)",
    "frames": "import sys\n    return sys._getframe(1).f_locals['spec'].reference(x, dim)",
    "inspect frames": "import inspect\n    return inspect.currentframe().f_back.f_locals",
    "module dict": "return torch.__dict__['soft' + 'max'](x, dim)",
    "vars": "return vars(torch)['soft' + 'max'](x, dim)",
    "importlib": "m = __import__('importlib').import_module('torch')\n    return m",
    "sys through torch": "return torch.sys.modules['torch'].__dict__",
    "star import": "from torch.nn.functional import *\n    return softmax(x, dim)",
    "pickle": "import pickle\n    return pickle.loads(b'ctorch\\nsoftmax\\n.')(x, dim)",
    "ipython": "return get_ipython().ev('torch.soft' + 'max(x, dim)')",
    "private name": "return torch._softmax(x, dim, False)",
}


@pytest.mark.parametrize("name", sorted(REACHES))
def test_any_dynamic_reach_earns_no_automatic_point_and_says_why(name):
    result = _result()
    source = f"import torch\ndef softmax(x, dim=-1):\n    {REACHES[name]}\n"
    forbidden.judge_sources(result, nb00.softmax, [source])
    assert result.status == "failed", (name, result)
    assert "torch.softmax" in result.message or "_softmax" in result.message, result.message
    if name != "private name":  # named outright: a use, not a reach
        assert "reviews it by hand" in result.message and result.flags, result


def test_honest_answers_keep_their_point_where_the_text_forbids_a_function():
    numpy_answer = (
        "import numpy as np\nimport torch\ndef softmax(x, dim=-1):\n"
        "    a = x.numpy()\n    e = np.exp(a - a.max(axis=dim, keepdims=True))\n"
        "    return torch.from_numpy(e / e.sum(axis=dim, keepdims=True))\n"
    )
    for source in (RIGHT, numpy_answer):
        result = _result()
        forbidden.judge_sources(result, nb00.softmax, [source])
        assert result.status == "passed" and not result.flags, (source, result)


def test_getattr_where_the_text_forbids_nothing_keeps_its_point():
    from course.checks import nb10

    result = _result()
    lora = (  # 10.2's way: the parent module by name, the layer replaced by setattr
        "def add_lora(model, targets, r, alpha):\n"
        "    for name, module in list(model.named_modules()):\n"
        "        parent = model.get_submodule(name.rsplit('.', 1)[0]) if '.' in name else model\n"
        "        setattr(parent, name.rsplit('.', 1)[-1], getattr(parent, name.rsplit('.', 1)[-1]))\n"
        "    return model\n"
    )
    forbidden.judge_sources(result, nb10.add_lora, [lora])
    assert result.status == "passed" and not result.flags


def test_a_check_whose_text_forbids_nothing_reads_nothing():
    result = _result()
    forbidden.judge_sources(result, None, ["exec('torch.softmax')"])
    assert result.status == "passed" and not result.flags

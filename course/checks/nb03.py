"""Checks for notebook 03, multi-head attention.

References are independent of the course's solution: head splitting is checked head by head
against its definition (head h holds features h*d_k ... (h+1)*d_k - 1), the module against
``torch.nn.MultiheadAttention`` carrying the student's weights (read from its state dict by
:mod:`course.checks.reference`), the parameter count against that module's ``numel``.

Every call of the student's code goes through :func:`course.properties.call` (inputs untouched,
global state unchanged); the cases and the module configurations are tables.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import nn

from course.check import CheckFailure, exercise_check, expect, expect_close, expect_shape
from course.checks.reference import is_dropout_of, key, tensor, torch_attention
from course.observe import StudentError
from course.properties import (
    call,
    construct,
    generator,
    gradients,
    meta_device,
    observe,
    observe_gradients,
)

OWNER = "MultiHeadAttention"
MHA_NAMES = ("query", "key", "value", "mask")


def _named(what: str, function: Any, *args: Any, **kwargs: Any) -> Any:
    """:func:`course.properties.call`, with an error of the student's code told with the case."""
    try:
        return call(what, function, *args, **kwargs)
    except StudentError as error:
        raise CheckFailure(f"on {what}, {error.message}") from None


def _expect_value_error(what: str, function: Callable[[], Any], hint: str) -> None:
    """The exercise text: ``d_model`` not divisible by the heads raises a ValueError."""

    def attempt() -> Any:
        try:
            result = function()
        except ValueError:
            return {"raised": "ValueError"}
        if isinstance(result, tuple | list) and result:
            result = result[0]
        return {"shape": tuple(result.shape) if isinstance(result, torch.Tensor) else None}

    try:
        # random=True: a constructor may draw its initial weights before it refuses
        outcome = observe(what, attempt, random=True)
    except StudentError as error:
        raise CheckFailure(
            f"{what} raised {error.error_type.split(',')[0]}; 10 features cannot be split into "
            "3 equal heads, and the exercise text asks for a ValueError that says so.",
            hint,
        ) from None
    if outcome.get("raised") == "ValueError":
        return
    shape = outcome.get("shape")
    got = f" and returned shape {shape}" if shape else ""
    raise CheckFailure(
        f"{what} was accepted{got}: 10 features cannot be split into 3 equal heads, so "
        "features would be silently dropped. The exercise text asks for a ValueError.",
        hint,
    )


# --- 3.1 split and merge ----------------------------------------------------------------------

SPLIT_HINT = (
    "The exercise text says which features head h holds, and that the head axis comes before "
    "the length axis; merge_heads must undo split_heads exactly, whatever the memory layout."
)


class SplitCase(NamedTuple):
    shape: tuple[int, int, int]
    heads: int
    dtype: torch.dtype = torch.float32


SPLIT_CASES = [
    SplitCase((2, 5, 12), 3),
    SplitCase((1, 7, 8), 2),  # a batch of one
    SplitCase((3, 1, 6), 3),  # a single token
    SplitCase((2, 4, 10), 1),  # one head
    SplitCase((2, 3, 6), 6),  # one feature per head
    SplitCase((2, 3, 8), 4, torch.float64),
]


def _expect_heads(split: torch.Tensor, x: torch.Tensor, heads: int, what: str) -> None:
    d_k = x.size(-1) // heads
    for h in range(heads):
        expect(
            torch.equal(split[:, h], x[:, :, h * d_k : (h + 1) * d_k]),
            f"{what}: head {h} should hold features {h * d_k}..{(h + 1) * d_k - 1} of every "
            "token (a contiguous chunk of the last axis), but it holds other values.",
            "Split the last axis (the features) into heads, then move the head axis; reshaping "
            "straight to the final shape mixes tokens.",
        )


@exercise_check("Exercise 3.1", "split and merge heads", hint=SPLIT_HINT)
def split_merge_heads(student_split: Callable[..., Any], student_merge: Callable[..., Any]) -> None:
    """Head h must hold features h*d_k ... (h+1)*d_k - 1 of every token; merge must undo split;
    several shapes, float64, gradients, the device and the ValueError of the text."""
    g = generator(0)
    for case in SPLIT_CASES:
        batch, length, d_model = case.shape
        d_k = d_model // case.heads
        x = torch.randn(*case.shape, generator=g, dtype=case.dtype)
        what = f"split_heads(x of shape {case.shape}, {case.heads})"
        split = _named(what, student_split, x, case.heads, names=("x",))
        expect_shape(
            split,
            (batch, case.heads, length, d_k),
            what,
            "The result is (batch, heads, length, d_model / heads).",
        )
        expect(split.dtype == x.dtype, f"{what} has dtype {split.dtype}, expected {x.dtype}.")
        _expect_heads(split, x, case.heads, what)

        # Contiguous (B, H, L, d), like the output of attention: transpose-then-view fails on it.
        y = torch.randn(batch, case.heads, length, d_k, generator=g, dtype=case.dtype)
        what = f"merge_heads(x of shape {tuple(y.shape)})"
        merged = _named(what, student_merge, y, names=("x",))
        expect_shape(merged, case.shape, what, "The result is (batch, length, heads * d_head).")
        for h in range(case.heads):
            expect(
                torch.equal(merged[:, :, h * d_k : (h + 1) * d_k], y[:, h]),
                f"{what}: features {h * d_k}..{(h + 1) * d_k - 1} of each token should be head "
                f"{h}'s output for that token, but they hold other values.",
                "Bring the head axis back next to the features before flattening them; "
                "flattening (B, H, L, d) as it is interleaves tokens and heads.",
            )

    x = torch.randn(2, 5, 12, generator=g)
    what = "gradients through merge_heads(split_heads(x, 3))"
    got = observe_gradients(what, lambda t: student_merge(student_split(t, 3)), [x])
    expected = gradients(lambda t: t * 1.0, [x])["inputs"][0]
    mine = got["inputs"][0]
    expect(
        isinstance(mine, torch.Tensor),
        f"{what}: no gradient reaches x (the property violated: gradients).",
        "Use torch's reshaping operations on the tensor itself; no .detach() or copies.",
    )
    expect_close(mine, expected, f"the gradient of x ({what})", atol=0.0, rtol=0.0)

    for name, function, args in (
        ("split_heads(x, 3)", student_split, (x, 3)),
        ("merge_heads(x)", student_merge, (x.reshape(2, 5, 3, 4).transpose(1, 2),)),
    ):
        what = f"{name} with x on another device (meta)"
        device = meta_device(what, function, *args)
        expect(
            device in (None, "meta"),
            f"{what} returned or mixed in a tensor on the {device} (the property violated: "
            "device).",
            "Rearrange the input tensor itself; any tensor you create must be on its device.",
        )

    _expect_value_error(
        "split_heads(x of shape (2, 5, 10), 3)",
        lambda: student_split(torch.zeros(2, 5, 10), 3),
        "Check the divisibility first, as the exercise text asks.",
    )


# --- 3.2 MultiHeadAttention -------------------------------------------------------------------

MHA_HINT = (
    "Follow the exercise text: project with w_q, w_k, w_v; split into heads; attend with one "
    "mask shared by every head; merge the heads; project with w_o."
)


class Config(NamedTuple):
    """One module built as ``MultiHeadAttention(d_model, heads, **kwargs)``."""

    d_model: int
    heads: int
    kwargs: dict[str, Any]
    dtype: torch.dtype = torch.float32
    training: bool = False

    @property
    def what(self) -> str:
        extra = "".join(f", {k}={v}" for k, v in self.kwargs.items())
        mode = "training" if self.training else "eval"
        dtype = ", float64" if self.dtype == torch.float64 else ""
        return f"MultiHeadAttention({self.d_model}, {self.heads}{extra}) in {mode} mode{dtype}"


class MhaCase(NamedTuple):
    what: str
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    mask: torch.Tensor | None = None


def _padding(lengths: list[int], length: int) -> torch.Tensor:
    """(B, 1, length) boolean mask, True for the first ``lengths[b]`` positions."""
    return (torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]).unsqueeze(1)


def _cases(d_model: int, dtype: torch.dtype, offset: int) -> list[MhaCase]:
    g = generator(100 + offset)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, d_model, generator=g, dtype=dtype)

    x, q, k, v, x4, x1 = (
        randn(2, 5),
        randn(2, 3),
        randn(2, 7),
        randn(2, 7),
        randn(4, 6),
        randn(1, 1),
    )
    pad4 = _padding([6, 2, 5, 3], 6)
    causal = torch.ones(6, 6, dtype=torch.bool).tril().unsqueeze(0)
    return [
        MhaCase("self-attention, x of shape (2, 5, d_model), no mask", x, x, x),
        MhaCase("cross-attention, 3 queries over 7 keys with other values", q, k, v),
        MhaCase("cross-attention with a (2, 1, 7) padding mask", q, k, v, _padding([7, 4], 7)),
        MhaCase(
            "self-attention, a batch of 4 sequences of different lengths, (4, 1, 6) mask",
            x4,
            x4,
            x4,
            pad4,
        ),
        MhaCase("self-attention with a (1, 6, 6) causal mask", x4, x4, x4, causal),
        MhaCase(
            "self-attention with a causal and padding mask (4, 6, 6)", x4, x4, x4, causal & pad4
        ),
        MhaCase(
            "cross-attention with a (2, 1, 1, 7) mask that already has a head axis",
            q,
            k,
            v,
            _padding([3, 6], 7).unsqueeze(1),
        ),
        MhaCase("a batch of one, a single token", x1, x1, x1),
    ]


# Each configuration with the indices of the cases it runs.
CONFIGS: list[tuple[Config, tuple[int, ...]]] = [
    (Config(24, 4, {}), (0, 1, 2, 3, 4, 5, 6, 7)),
    (Config(18, 3, {"bias": False}, torch.float64), (1, 2, 5)),
    (Config(12, 1, {}), (1, 4)),
    (Config(8, 8, {}), (2,)),
    (Config(16, 2, {"dropout": 0.5}), (0, 2)),  # eval mode: dropout must change nothing
    (Config(24, 4, {"dropout": 0.0}, training=True), (1, 3)),  # no dropout of its own
]


def _runner(module: Any, config: Config) -> Callable[..., Any]:
    """The student's forward in ``config``'s dtype and mode (only ever called inside observe)."""

    def run(query: Any, key: Any, value: Any, mask: Any = None) -> Any:
        module.to(config.dtype).train(config.training)
        return module(query, key, value, mask)

    return run


def _torch_mask(mask: torch.Tensor | None, batch: int, heads: int, lq: int, lk: int) -> Any:
    """The student's boolean mask (True = may attend) as torch's (B * H, Lq, Lk), True = blocked."""
    if mask is None:
        return None
    full = mask.expand(batch, heads, lq, lk) if mask.dim() == 4 else mask.unsqueeze(1)
    return ~full.expand(batch, heads, lq, lk).reshape(batch * heads, lq, lk)


def _reference(twin: nn.MultiheadAttention, case: MhaCase) -> tuple[torch.Tensor, torch.Tensor]:
    batch, lq, lk = case.query.size(0), case.query.size(1), case.key.size(1)
    with torch.no_grad():
        return twin(
            case.query,
            case.key,
            case.value,
            attn_mask=_torch_mask(case.mask, batch, twin.num_heads, lq, lk),
            need_weights=True,
            average_attn_weights=False,
        )


def _expect_weights_shape(weights: Any, expected: torch.Size, config: Config, what: str) -> None:
    """Name what the shape of the weights says: the wrong number of heads, no head axis."""
    expect(
        isinstance(weights, torch.Tensor),
        f"the attention weights ({what}) should be a tensor, got {type(weights).__name__}.",
        "Return the output and the weights of every head, as the exercise text says.",
    )
    if tuple(weights.shape) == tuple(expected):
        return
    d_k = config.d_model // config.heads
    if weights.dim() == 4 and weights.shape[1] != config.heads:
        raise CheckFailure(
            f"the attention weights ({what}) have {weights.shape[1]} heads on axis 1, but "
            f"num_heads={config.heads}: the number of heads is wrong (expected shape "
            f"{tuple(expected)}, each head with d_model / num_heads = {d_k} features).",
            "Split into num_heads heads, not into heads of num_heads features.",
        )
    if weights.dim() == 3:
        raise CheckFailure(
            f"the attention weights ({what}) have shape {tuple(weights.shape)}, without a head "
            f"axis; expected {tuple(expected)}, the weights of every head (not an average).",
            "The exercise text asks for the per-head weights (batch, heads, Lq, Lk).",
        )
    raise CheckFailure(
        f"the attention weights ({what}) have shape {tuple(weights.shape)}, expected "
        f"{tuple(expected)} (batch, heads, Lq, Lk).",
        MHA_HINT,
    )


def _expect_mask_reaches(weights: torch.Tensor, mask: torch.Tensor, what: str) -> None:
    full = mask if mask.dim() == 4 else mask.unsqueeze(1)
    leaked = ~full.expand(weights.shape) & (weights != 0)
    if leaked.any():
        b, h, i, j = (int(n) for n in leaked.nonzero()[0])
        raise CheckFailure(
            f"with {what}, head {h} of sequence {b} gave weight {weights[b, h, i, j].item():.2g} "
            f"to the blocked key {j} from query {i}; blocked keys must get exactly 0 in every "
            "head (the property violated: the mask).",
            "One mask serves every head: the exercise text says how to line it up with the "
            "head axis, and what to do with a mask that already has one.",
        )


def _expect_matches(
    result: Any, twin: nn.MultiheadAttention, config: Config, case: MhaCase
) -> None:
    what = case.what
    expect(
        isinstance(result, tuple | list) and len(result) == 2,
        f"forward should return (output, weights), got {type(result).__name__}.",
        "Return the output and the per-head weights, as the exercise text says.",
    )
    output, weights = result
    ref_output, ref_weights = _reference(twin, case)
    _expect_weights_shape(weights, ref_weights.shape, config, what)
    if case.mask is not None:
        _expect_mask_reaches(weights, case.mask, what)
    tolerance = {"atol": 1e-10, "rtol": 1e-8} if config.dtype == torch.float64 else {}
    expect_close(
        weights,
        ref_weights,
        f"the tensor of attention weights ({what})",
        "Check how you split the heads, the scaling (by the size of one head) and the mask "
        "(True = may attend, one mask for every head).",
        **tolerance,
    )
    if config.training:
        tight = (
            {"atol": 1e-10, "rtol": 1e-8}
            if config.dtype == torch.float64
            else {"atol": 1e-5, "rtol": 1e-4}
        )
        expect(
            isinstance(output, torch.Tensor)
            and output.shape == ref_output.shape
            and torch.allclose(output, ref_output, **tight),
            f"with {what}, the output is not the eval-mode attention: with dropout=0.0 nothing "
            "may be dropped or changed in training mode (the property violated: training mode).",
            DROPOUT_HINT,
        )
    expect_close(
        output,
        ref_output,
        f"the output ({what})",
        "The weights match torch's, so look at what follows the attention: how the heads are "
        "merged, and w_o."
        + (" In training mode with dropout=0 nothing may be dropped." if config.training else ""),
        **tolerance,
    )


def _expect_gradients(StudentMHA: type[nn.Module]) -> None:  # noqa: N803 - a class
    """Gradients of the output with respect to the inputs and every weight, against torch's."""
    config = Config(24, 4, {})
    module, state = construct(f"{config.what}, for gradients", StudentMHA, 24, 4)
    twin = torch_attention(state, 24, 4, owner=OWNER)
    case = _cases(24, torch.float32, 0)[2]
    what = f"gradients of {config.what} on {case.what}"

    def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Any:
        result = module.eval()(q, k, v, case.mask)
        return result[0] if isinstance(result, tuple | list) else result

    got = observe_gradients(
        what, forward, [case.query, case.key, case.value], lambda: dict(module.named_parameters())
    )
    mask = _torch_mask(case.mask, 2, 4, 3, 7)
    ref = gradients(
        lambda q, k, v: twin(q, k, v, attn_mask=mask, need_weights=False)[0],
        [case.query, case.key, case.value],
        dict(twin.named_parameters()),
    )
    d = 24
    expected = dict(zip(MHA_NAMES, ref["inputs"], strict=False))
    for index, name in enumerate(("w_q", "w_k", "w_v")):
        rows = slice(index * d, (index + 1) * d)
        expected[f"{name}.weight"] = ref["parameters"]["in_proj_weight"][rows]
        expected[f"{name}.bias"] = ref["parameters"]["in_proj_bias"][rows]
    expected["w_o.weight"] = ref["parameters"]["out_proj.weight"]
    expected["w_o.bias"] = ref["parameters"]["out_proj.bias"]
    for name, reference in expected.items():
        mine = (
            got["inputs"][MHA_NAMES.index(name)]
            if name in MHA_NAMES
            else got["parameters"].get(name)
        )
        expect(
            isinstance(mine, torch.Tensor),
            f"{what}: no gradient reaches `{name}` (the property violated: gradients).",
            "Compute with the layers and differentiable torch operations; no .detach() or "
            "torch.no_grad() on the way to the output.",
        )
        expect_close(
            mine,
            reference,
            f"the gradient of `{name}` ({what})",
            "Every projection must take part in the output as the formula says, with nothing "
            "detached on the way.",
        )


DROPOUT_HINT = (
    "The exercise text says where dropout acts (on the attention weights, before they multiply "
    "the values, in training mode only) and which weights forward returns."
)


def _expect_dropout_on_weights(StudentMHA: type[nn.Module]) -> None:  # noqa: N803 - a class
    """In training mode dropout zeroes attention weights (the copy that multiplies V); the
    returned weights are those before dropout.

    The weights that multiplied V are recovered from the output itself, whatever the random
    stream: undo w_o (a square, invertible matrix, from the state dict), split the heads, and
    solve against each head's values (4 keys, 8 features per head: full row rank).
    """
    p, d_model, heads, lq, lk = 0.5, 16, 2, 3, 4
    d_k = d_model // heads
    module, state = construct(
        "MultiHeadAttention(16, 2, dropout=0.5)", StudentMHA, d_model, heads, dropout=p
    )
    g = generator(4)
    query = torch.randn(2, lq, d_model, generator=g, dtype=torch.float64)
    memory = torch.randn(2, lk, d_model, generator=g, dtype=torch.float64)
    eval_config = Config(d_model, heads, {"dropout": p}, torch.float64)
    train_config = eval_config._replace(training=True)
    what = train_config.what
    result = _named(
        eval_config.what, _runner(module, eval_config), query, memory, memory, names=MHA_NAMES
    )
    expect(isinstance(result, tuple | list) and len(result) == 2, "forward should return a pair.")
    out_eval, w_eval = result
    result = _named(
        what, _runner(module, train_config), query, memory, memory, names=MHA_NAMES, random=True
    )
    expect(
        isinstance(result, tuple | list) and len(result) == 2,
        f"forward should return (output, weights), got {type(result).__name__}.",
    )
    out_train, w_train = result
    expect_shape(out_train, out_eval.shape, f"the output ({what})")
    expect_shape(w_train, w_eval.shape, f"the attention weights ({what})")
    if not torch.allclose(w_train, w_eval, atol=1e-10):
        dropped = is_dropout_of(w_train, w_eval, p)
        raise CheckFailure(
            f"with {what}, the returned attention weights "
            + (
                "are the ones after dropout (zeros and 1/(1-p)-scaled values); return the "
                "weights before dropout, the pattern the model computed."
                if dropped
                else "differ from those in eval mode; return the weights before dropout, the "
                "pattern the model computed."
            ),
            DROPOUT_HINT,
        )
    expect(
        not torch.allclose(out_train, out_eval, atol=1e-10),
        f"with {what} the output equals the eval-mode output: dropout is never applied "
        "(the property violated: training mode).",
        DROPOUT_HINT,
    )
    w_o = tensor(state, "w_o", "weight", OWNER).double()
    bias = state.get(key("w_o", "bias"))
    bias = torch.zeros(d_model, dtype=torch.float64) if bias is None else bias.double()
    w_v = tensor(state, "w_v", "weight", OWNER).double()
    v_bias = state.get(key("w_v", "bias"))
    v_bias = torch.zeros(d_model, dtype=torch.float64) if v_bias is None else v_bias.double()

    def merged_heads(out: torch.Tensor) -> torch.Tensor:  # undo w_o: (B, H, Lq, d_k)
        merged = torch.linalg.solve(w_o.T, out - bias, left=False)
        return merged.reshape(2, lq, heads, d_k).transpose(1, 2)

    heads_train, heads_eval = merged_heads(out_train), merged_heads(out_eval)
    v = (memory @ w_v.T + v_bias).reshape(2, lk, heads, d_k).transpose(1, 2)
    used = heads_train @ torch.linalg.pinv(v)  # the weights that multiplied V
    if torch.allclose(used @ v, heads_train, atol=1e-8) and is_dropout_of(used, w_eval, p):
        return
    if is_dropout_of(out_train, out_eval, p):
        mistake = "dropout acts on the module's output (after w_o)"
    elif is_dropout_of(heads_train, heads_eval, p):
        mistake = "dropout acts on the heads' outputs (weights @ V, before w_o)"
    else:
        mistake = (
            "the output is not the values weighted by the attention weights with dropout(p) "
            "applied once"
        )
    raise CheckFailure(
        f"with {what}, {mistake} (the property violated: training mode); dropout belongs on "
        "the attention weights: each weight is zeroed with probability p (the others scaled by "
        "1/(1-p)) before they multiply V.",
        DROPOUT_HINT,
    )


@exercise_check("Exercise 3.2", "multi-head attention", hint=MHA_HINT)
def multi_head_attention(StudentMHA: type[nn.Module]) -> None:  # noqa: N803 - a class
    """Against torch.nn.MultiheadAttention carrying the module's weights, for a table of
    configurations (sizes, heads, bias, float64, dropout in eval and training mode) and cases
    (self-, cross-, masked attention); gradients; the device; the ValueError of the text."""
    for config, indices in CONFIGS:
        module, state = construct(
            f"MultiHeadAttention({config.d_model}, {config.heads}"
            + "".join(f", {k}={v}" for k, v in config.kwargs.items())
            + ")",
            StudentMHA,
            config.d_model,
            config.heads,
            **config.kwargs,
        )
        twin = torch_attention(
            state,
            config.d_model,
            config.heads,
            bias=config.kwargs.get("bias", True),
            dtype=config.dtype,
            owner=OWNER,
        )
        cases = _cases(config.d_model, config.dtype, config.d_model)
        for index in indices:
            case = cases[index]
            case = case._replace(what=f"{config.what}, {case.what}")
            args = (case.query, case.key, case.value, case.mask)
            result = _named(
                case.what,
                _runner(module, config),
                *args,
                names=MHA_NAMES,
                random=config.training,  # dropout may draw, even when it should drop nothing
            )
            _expect_matches(result, twin, config, case)

    _expect_gradients(StudentMHA)
    _expect_dropout_on_weights(StudentMHA)

    case = _cases(24, torch.float32, 0)[2]
    for mask in (case.mask, None):
        module, _ = construct("MultiHeadAttention(24, 4), for the device", StudentMHA, 24, 4)
        shown = "with a (2, 1, 7) padding mask" if mask is not None else "without a mask"
        what = f"MultiHeadAttention(24, 4) on tensors on another device (meta), {shown}"
        device = meta_device(
            what,
            lambda m, q, k, v, mask: m.eval()(q, k, v, mask),
            module,
            case.query,
            case.key,
            case.value,
            mask,
        )
        expect(
            device in (None, "meta"),
            f"{what}: your code created a tensor on the {device} and mixed it in (the property "
            "violated: device). On a GPU this fails.",
            "Any tensor forward creates must be on the device of its inputs.",
        )

    zeros = torch.zeros(2, 3, 10)
    _expect_value_error(
        "MultiHeadAttention(d_model=10, num_heads=3)",
        lambda: StudentMHA(10, 3)(zeros, zeros, zeros),
        "Check the divisibility in __init__, as the exercise text asks.",
    )


# --- 3.3 parameter count ----------------------------------------------------------------------


class CountCase(NamedTuple):
    d_model: int
    heads: int
    bias: bool | None  # None: the argument left out (its default, True)


COUNT_CASES = [
    CountCase(512, 8, True),
    CountCase(384, 12, True),
    CountCase(64, 4, False),
    CountCase(8, 1, True),
    CountCase(512, 1, None),
    CountCase(768, 12, False),
    CountCase(6, 6, None),
]


def _torch_count(d_model: int, heads: int, bias: bool) -> int:
    module = nn.MultiheadAttention(d_model, heads, bias=bias, device="meta")
    return sum(p.numel() for p in module.parameters())


@exercise_check(
    "Exercise 3.3",
    "parameter count",
    hint="Add up the weight matrices and bias vectors of the projections of 3.2, and ask which "
    "of their sizes depend on the number of heads.",
)
def parameter_count(student_count: Callable[..., Any]) -> None:
    """Against the parameters of torch.nn.MultiheadAttention for a table of sizes. (The count
    is what is checked: one taken from a module built on the spot is right too, so the calls
    may draw from the global generator.)"""
    for case in COUNT_CASES:
        if case.bias is None:
            what = f"mha_parameter_count({case.d_model}, {case.heads})"
            got = call(what, student_count, case.d_model, case.heads, random=True)
        else:
            what = f"mha_parameter_count({case.d_model}, {case.heads}, bias={case.bias})"
            got = call(what, student_count, case.d_model, case.heads, bias=case.bias, random=True)
        expect(
            isinstance(got, int) and not isinstance(got, bool),
            f"{what} returned {type(got).__name__}, expected an int (a number of parameters).",
        )
        bias = True if case.bias is None else case.bias
        expected = _torch_count(case.d_model, case.heads, bias)
        expect(
            got == expected,
            f"{what} = {got:,}, but torch.nn.MultiheadAttention({case.d_model}, {case.heads}, "
            f"bias={bias}) has {expected:,} parameters.",
        )

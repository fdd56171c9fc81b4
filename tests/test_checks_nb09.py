"""Notebook 09's checks: right variants pass (the course's solution, nanoGPT's and Hugging
Face's code glued at the interface, loops, float64 inside), the stubs are "not implemented", and
each family of wrong answers fails with the property it violates named."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course.checks import nb09
from course.nn import merge_heads, scaled_dot_product_attention, split_heads

NEG_INF = float("-inf")


def stub(*args, **kwargs):
    raise NotImplementedError


# --- 9.1 ----------------------------------------------------------------------------------------


def lm_loss(logits, token_ids, pad_id):
    vocab = logits.size(-1)
    loss = F.cross_entropy(
        logits[:, :-1].reshape(-1, vocab), token_ids[:, 1:].reshape(-1), ignore_index=pad_id
    )
    return loss, loss.exp()


def _nanogpt_loss(logits, token_ids, pad_id):
    # nanoGPT: targets are the inputs shifted by one, -1 where there is nothing to predict
    targets = token_ids[:, 1:].masked_fill(token_ids[:, 1:] == pad_id, -1)
    loss = F.cross_entropy(
        logits[:, :-1].reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1
    )
    return loss, math.exp(loss.item())


def _hf_loss(logits, token_ids, pad_id):
    # transformers' ForCausalLMLoss: labels with -100 on padding, shift inside
    labels = token_ids.masked_fill(token_ids == pad_id, -100)
    shift_logits = logits[..., :-1, :].contiguous()
    shift_labels = labels[..., 1:].contiguous()
    loss = (
        F.cross_entropy(
            shift_logits.view(-1, shift_logits.size(-1)).float(),
            shift_labels.view(-1),
            ignore_index=-100,
            reduction="sum",
        )
        / (shift_labels != -100).sum()
    )
    return loss.to(logits.dtype), torch.exp(loss)


def _manual_loss(logits, token_ids, pad_id):
    logp = torch.log_softmax(logits[:, :-1].double(), dim=-1)
    targets = token_ids[:, 1:]
    picked = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    real = targets != pad_id
    loss = -(picked * real).sum() / real.sum()
    return loss.to(logits.dtype), loss.exp()


LOSS_RIGHT = {
    "cross_entropy ignore_index": lm_loss,
    "nanoGPT targets": _nanogpt_loss,
    "transformers' shift and -100": _hf_loss,
    "log_softmax, gather, mask, float64": _manual_loss,
}


def _unshifted(logits, token_ids, pad_id):
    loss = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)), token_ids.reshape(-1), ignore_index=pad_id
    )
    return loss, loss.exp()


def _padding_counted(logits, token_ids, pad_id):
    loss = F.cross_entropy(
        logits[:, :-1].reshape(-1, logits.size(-1)), token_ids[:, 1:].reshape(-1)
    )
    return loss, loss.exp()


def _input_mask(logits, token_ids, pad_id):
    logp = torch.log_softmax(logits[:, :-1], dim=-1)
    picked = logp.gather(-1, token_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    real = token_ids[:, :-1] != pad_id  # the mask of the inputs, not of the targets
    loss = -(picked * real).sum() / real.sum()
    return loss, loss.exp()


def _mean_of_row_means(logits, token_ids, pad_id):
    logp = torch.log_softmax(logits[:, :-1], dim=-1)
    picked = logp.gather(-1, token_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    real = token_ids[:, 1:] != pad_id
    loss = (-(picked * real).sum(1) / real.sum(1)).mean()
    return loss, loss.exp()


def _log_of_softmax(logits, token_ids, pad_id):
    p = torch.softmax(logits[:, :-1], dim=-1).gather(-1, token_ids[:, 1:].unsqueeze(-1))
    real = token_ids[:, 1:] != pad_id
    loss = -(torch.log(p.squeeze(-1)) * real).sum() / real.sum()
    return loss, loss.exp()


def _exp_of_sum(logits, token_ids, pad_id):
    loss, _ = lm_loss(logits, token_ids, pad_id)
    targets = (token_ids[:, 1:] != pad_id).sum()
    return loss, (loss * targets).exp()


def _detached(logits, token_ids, pad_id):
    loss, ppl = lm_loss(logits.detach(), token_ids, pad_id)
    return loss, ppl


def _item(logits, token_ids, pad_id):
    loss, _ = lm_loss(logits, token_ids, pad_id)
    return loss.item(), math.exp(loss.item())


def _in_place(logits, token_ids, pad_id):
    logits -= logits.amax(-1, keepdim=True)
    return lm_loss(logits, token_ids, pad_id)


def _mask_on_cpu(logits, token_ids, pad_id):
    logp = torch.log_softmax(logits[:, :-1], dim=-1)
    picked = logp.gather(-1, token_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    real = torch.tensor((token_ids[:, 1:] != pad_id).shape).new_ones(picked.shape)  # on the CPU
    real = real & (token_ids[:, 1:] != pad_id)
    loss = -(picked * real).sum() / real.sum()
    return loss, loss.exp()


def _pad_zero(logits, token_ids, pad_id):
    return lm_loss(logits, token_ids, 0)  # the pad id of this notebook's tokenizer, hard-coded


LOSS_WRONG = {
    "pad_id 0 hard-coded": (_pad_zero, "pad_id=5"),
    "unshifted targets": (_unshifted, "position t predicts token t + 1"),
    "padding counted": (_padding_counted, "padding ignored"),
    "the inputs' padding mask": (_input_mask, "padding ignored"),
    "mean of per-row means": (_mean_of_row_means, "padding ignored"),
    "log of softmax (numeric range)": (_log_of_softmax, "numeric range"),
    "perplexity from the summed loss": (_exp_of_sum, "exp(loss)"),
    "detached logits (gradients)": (_detached, "gradients"),
    "loss as a float": (_item, "stated return type"),
    "logits changed in place (inputs untouched)": (_in_place, "inputs untouched"),
    "a mask made on the CPU (device)": (_mask_on_cpu, "device"),
}


# --- 9.2 ----------------------------------------------------------------------------------------


def filter_logits(logits, temperature=1.0, top_k=None, top_p=None):
    logits = logits / temperature
    if top_k is not None and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, NEG_INF)
    if top_p is not None and top_p < 1.0:
        probs = torch.softmax(logits, dim=-1)
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass of the more probable tokens
        remove = (before >= top_p).scatter(-1, order, before >= top_p)
        logits = logits.masked_fill(remove, NEG_INF)
    return logits


def _hf_filter(logits, temperature=1.0, top_k=None, top_p=None):
    from transformers.generation.logits_process import (
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    scores = logits.reshape(-1, logits.size(-1))
    scores = TemperatureLogitsWarper(temperature)(None, scores)
    if top_k is not None:
        scores = TopKLogitsWarper(top_k)(None, scores)
    if top_p is not None:
        scores = TopPLogitsWarper(top_p)(None, scores)
    return scores.reshape(logits.shape)


def _nanogpt_filter(logits, temperature=1.0, top_k=None, top_p=None):
    logits = logits / temperature  # nanoGPT's generate(): scale, then crop to the top k
    if top_k is not None:
        v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
        logits[logits < v[..., [-1]]] = -float("Inf")
    if top_p is not None and top_p < 1:  # the nucleus in Holtzman et al.'s words, a loop
        flat = logits.reshape(-1, logits.size(-1))
        for row in flat:
            probs = torch.softmax(row, dim=-1)
            mass = 0.0
            for index in probs.argsort(descending=True).tolist():
                if mass >= top_p:
                    row[index] = NEG_INF
                mass += float(probs[index])
        logits = flat.reshape(logits.shape)
    return logits


def _drops_zero_probability(logits, temperature=1.0, top_k=None, top_p=None):
    """At top_p = 1, the tokens whose probability underflows to 0 removed (as Hugging Face's
    cumulative-sum filter does): the text's "smallest set reaching p" allows it."""
    logits = filter_logits(logits, temperature, top_k, top_p)
    if top_p is not None and top_p >= 1:
        logits = logits.masked_fill(torch.softmax(logits, dim=-1) == 0, NEG_INF)
    return logits


def _drops_tail_at_one(logits, temperature=1.0, top_k=None, top_p=None):
    """At top_p = 1, tokens of probability below 1e-6 removed too: they hold mass, so wrong."""
    logits = filter_logits(logits, temperature, top_k, top_p)
    if top_p is not None and top_p >= 1:
        logits = logits.masked_fill(torch.softmax(logits, dim=-1) < 1e-6, NEG_INF)
    return logits


def _float64_filter(logits, temperature=1.0, top_k=None, top_p=None):
    return filter_logits(logits.double(), temperature, top_k, top_p).to(logits.dtype)


FILTER_RIGHT = {
    "topk, sort and cumsum": filter_logits,
    "transformers' logits warpers": _hf_filter,
    "nanoGPT's top-k and a nucleus loop": _nanogpt_filter,
    "float64 inside": _float64_filter,
    "tokens of probability 0 dropped at top_p=1": _drops_zero_probability,
}


def _drops_crossing(logits, temperature=1.0, top_k=None, top_p=None):
    logits = filter_logits(logits, temperature, top_k)
    if top_p is not None:
        probs = torch.softmax(logits, dim=-1)
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        remove = sorted_probs.cumsum(-1) > top_p  # the token that crosses p goes too
        remove[..., 0] = False
        logits = logits.masked_fill(remove.scatter(-1, order, remove), NEG_INF)
    return logits


def _exactly_k(logits, temperature=1.0, top_k=None, top_p=None):
    logits = logits / temperature
    if top_k is not None and top_k < logits.size(-1):
        keep = torch.zeros_like(logits, dtype=torch.bool)
        keep.scatter_(-1, logits.topk(top_k, dim=-1).indices, True)  # ties beyond k dropped
        logits = logits.masked_fill(~keep, NEG_INF)
    return filter_logits(logits, 1.0, None, top_p)


def _k_crash(logits, temperature=1.0, top_k=None, top_p=None):
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, NEG_INF)
    return filter_logits(logits, 1.0, None, top_p)


def _temperature_last(logits, temperature=1.0, top_k=None, top_p=None):
    return filter_logits(logits, 1.0, top_k, top_p) / temperature


def _p_on_everything(logits, temperature=1.0, top_k=None, top_p=None):
    scaled = logits / temperature
    nucleus = filter_logits(scaled, 1.0, None, top_p)  # top-p of the full distribution
    topk = filter_logits(scaled, 1.0, top_k, None)
    return torch.where(torch.isneginf(nucleus) | torch.isneginf(topk), NEG_INF, scaled)


def _float32_p_one(logits, temperature=1.0, top_k=None, top_p=None):
    logits = filter_logits(logits, temperature, top_k)
    if top_p is not None:  # no special case for p = 1: rounding decides the tail
        probs = torch.softmax(logits.float(), dim=-1)
        sorted_probs, order = probs.sort(dim=-1, descending=False)
        after = sorted_probs.flip(-1).cumsum(-1).flip(-1) - sorted_probs
        remove = after >= top_p
        logits = logits.masked_fill(remove.scatter(-1, order, remove), NEG_INF)
    return logits


def _in_place_filter(logits, temperature=1.0, top_k=None, top_p=None):
    out = filter_logits(logits, temperature, top_k, top_p)
    logits.copy_(out)
    return out


def _renormalised(logits, temperature=1.0, top_k=None, top_p=None):
    return torch.log_softmax(filter_logits(logits, temperature, top_k, top_p), dim=-1)


def _cpu_fill(logits, temperature=1.0, top_k=None, top_p=None):
    out = filter_logits(logits, temperature, top_k, top_p)
    return torch.where(torch.isneginf(out), torch.full(out.shape, NEG_INF), out)


def _exp_without_shift(logits, temperature=1.0, top_k=None, top_p=None):
    logits = filter_logits(logits, temperature, top_k)
    if top_p is not None and top_p < 1:
        e = logits.exp()
        probs = e / e.sum(-1, keepdim=True)
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        before = sorted_probs.cumsum(-1) - sorted_probs
        remove = (before >= top_p).scatter(-1, order, before >= top_p)
        logits = logits.masked_fill(remove, NEG_INF)
    return logits


def _large_negative(logits, temperature=1.0, top_k=None, top_p=None):
    out = filter_logits(logits, temperature, top_k, top_p)
    return out.masked_fill(torch.isneginf(out), -1e9)  # "small enough", but not -inf


FILTER_WRONG = {
    "-1e9 instead of -inf": (_large_negative, "keeps"),
    "top-p drops the token that crosses p": (_drops_crossing, "the kept mass reaches p"),
    "top-k keeps exactly k despite ties": (_exactly_k, "ties"),
    "top_k larger than the vocabulary crashes": (_k_crash, "top_k=15"),
    "temperature after filtering": (_temperature_last, "temperature=0.7"),
    "top-p on the distribution before top-k": (_p_on_everything, "top_p"),
    "p = 1 decided by float32 rounding": (_float32_p_one, "top_p=1.0"),
    "p = 1 drops tokens that hold mass": (_drops_tail_at_one, "top_p=1.0"),
    "logits changed in place (inputs untouched)": (_in_place_filter, "inputs untouched"),
    "kept logits renormalised": (_renormalised, "logit / temperature"),
    "a -inf tensor made on the CPU (device)": (_cpu_fill, "device"),
    "exp without the max shift (numeric range)": (_exp_without_shift, "numeric range"),
}


# --- 9.3 ----------------------------------------------------------------------------------------


def _right_padded(model, rows, pad_id):
    device = next(model.parameters()).device
    lengths = torch.tensor([len(r) for r in rows], device=device)
    batch = torch.full((len(rows), int(lengths.max())), pad_id, device=device)
    for i, row in enumerate(rows):
        batch[i, : len(row)] = torch.tensor(row, device=device)
    with torch.no_grad():
        logits = model(batch)
    return logits[torch.arange(len(rows), device=device), lengths - 1]


def sample(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args):
    rows = [list(p) for p in prompts]
    new = [[] for _ in prompts]
    active = list(range(len(prompts)))
    for _ in range(max_new_tokens):
        if not active:
            break
        last = _right_padded(model, [rows[i] for i in active], pad_id)
        probs = torch.softmax(filter_logits(last, **filter_args), dim=-1)
        tokens = torch.multinomial(probs, 1, generator=generator).squeeze(1).tolist()
        for i, token in zip(active, tokens, strict=True):
            rows[i].append(token)
            new[i].append(token)
        active = [i for i, t in zip(active, tokens, strict=True) if t != eos_id]
    return new


def _one_row_at_a_time(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args):
    # nanoGPT's generate() loop, one prompt at a time
    out = []
    for prompt in prompts:
        idx = torch.tensor([prompt], device=next(model.parameters()).device)  # nanoGPT: on device
        for _ in range(max_new_tokens):
            with torch.no_grad():
                logits = model(idx)[:, -1, :]
            probs = F.softmax(filter_logits(logits, **filter_args), dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1, generator=generator)
            idx = torch.cat((idx, idx_next), dim=1)
            if idx_next.item() == eos_id:
                break
        out.append(idx[0, len(prompt) :].tolist())
    return out


def _hf_warped(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args):
    def warp(logits, temperature=1.0, top_k=None, top_p=None):
        return _hf_filter(logits, temperature, top_k, top_p)

    rows, new, done = [list(p) for p in prompts], [[] for _ in prompts], [False] * len(prompts)
    for _ in range(max_new_tokens):
        last = _right_padded(model, rows, pad_id)
        probs = torch.softmax(warp(last, **filter_args).double(), dim=-1)
        tokens = torch.multinomial(probs, 1, generator=generator).squeeze(1).tolist()
        for i, token in enumerate(tokens):
            if not done[i]:
                rows[i].append(token)
                new[i].append(token)
                done[i] = token == eos_id
        if all(done):
            break
    return new


SAMPLE_RIGHT = {
    "right-padded batches": sample,
    "one prompt at a time (nanoGPT's loop)": _one_row_at_a_time,
    "transformers' warpers, float64 softmax": _hf_warped,
}


def _global_rng(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args):
    real = torch.multinomial

    def unseeded(probs, n, generator=None):
        return real(probs, n)

    torch.multinomial = unseeded
    try:
        return sample(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args)
    finally:
        torch.multinomial = real


def _own_generator(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args):
    mine = torch.Generator().manual_seed(0)
    return sample(model, prompts, max_new_tokens, eos_id, pad_id, mine, **filter_args)


def _left_padded(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args):
    rows, new = [list(p) for p in prompts], [[] for _ in prompts]
    active = list(range(len(prompts)))
    for _ in range(max_new_tokens):
        if not active:
            break
        width = max(len(rows[i]) for i in active)
        batch = torch.tensor([[pad_id] * (width - len(rows[i])) + rows[i] for i in active])
        with torch.no_grad():
            last = model(batch)[:, -1]
        probs = torch.softmax(filter_logits(last, **filter_args), dim=-1)
        tokens = torch.multinomial(probs, 1, generator=generator).squeeze(1).tolist()
        for i, token in zip(active, tokens, strict=True):
            rows[i].append(token)
            new[i].append(token)
        active = [i for i, t in zip(active, tokens, strict=True) if t != eos_id]
    return new


def _last_column(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args):
    rows, new = [list(p) for p in prompts], [[] for _ in prompts]
    active = list(range(len(prompts)))
    for _ in range(max_new_tokens):
        if not active:
            break
        width = max(len(rows[i]) for i in active)
        batch = torch.tensor([rows[i] + [pad_id] * (width - len(rows[i])) for i in active])
        with torch.no_grad():
            last = model(batch)[:, -1]  # a padding position for the shorter rows
        probs = torch.softmax(filter_logits(last, **filter_args), dim=-1)
        tokens = torch.multinomial(probs, 1, generator=generator).squeeze(1).tolist()
        for i, token in zip(active, tokens, strict=True):
            rows[i].append(token)
            new[i].append(token)
        active = [i for i, t in zip(active, tokens, strict=True) if t != eos_id]
    return new


def _no_eos_stop(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args):
    return sample(model, prompts, max_new_tokens, -1, pad_id, generator, **filter_args)


def _eos_dropped(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args):
    rows = sample(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args)
    return [r[:-1] if r and r[-1] == eos_id else r for r in rows]


def _with_prompt(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args):
    rows = sample(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args)
    return [list(p) + r for p, r in zip(prompts, rows, strict=True)]


def _argmax(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args):
    return sample(model, prompts, max_new_tokens, eos_id, pad_id, generator, top_k=1)


def _filters_ignored(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args):
    return sample(model, prompts, max_new_tokens, eos_id, pad_id, generator)


def _appends_to_prompts(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args):
    rows = sample(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args)
    for prompt, row in zip(prompts, rows, strict=True):
        prompt.extend(row)
    return rows


def _temperature_times(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args):
    if "temperature" in filter_args:
        filter_args = dict(filter_args, temperature=1 / filter_args["temperature"])
    return sample(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args)


def _grad_off(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args):
    torch.set_grad_enabled(False)
    return sample(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args)


def _stop_all_rows(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args):
    rows, new = [list(p) for p in prompts], [[] for _ in prompts]
    for _ in range(max_new_tokens):
        last = _right_padded(model, rows, pad_id)
        probs = torch.softmax(filter_logits(last, **filter_args), dim=-1)
        tokens = torch.multinomial(probs, 1, generator=generator).squeeze(1).tolist()
        for i, token in enumerate(tokens):
            rows[i].append(token)
            new[i].append(token)
        if eos_id in tokens:  # one row's eos ends every row
            break
    return new


SAMPLE_WRONG = {
    "every row stops at the first eos": (_stop_all_rows, "stops after its eos"),
    "the global generator (global state)": (_global_rng, "random generator"),
    "a generator of its own": (_own_generator, "different seeds"),
    "left padding the model sees": (_left_padded, "own prompt"),
    "the last column of a right-padded batch": (_last_column, "own prompt"),
    "rows go on after eos": (_no_eos_stop, "eos"),
    "eos left out": (_eos_dropped, "expected"),
    "the prompt returned too": (_with_prompt, "only new tokens"),
    "always the most probable token": (_argmax, "draws follow"),
    "filter arguments ignored": (_filters_ignored, "survives"),
    "the caller's prompts extended (inputs untouched)": (_appends_to_prompts, "inputs untouched"),
    "temperature multiplied": (_temperature_times, "draws follow"),
    "gradients switched off (global state)": (_grad_off, "global state"),
}


# --- 9.4 ----------------------------------------------------------------------------------------


def attend_with_cache(attention, x, cache=None):
    q = split_heads(attention.w_q(x), attention.num_heads)
    k = split_heads(attention.w_k(x), attention.num_heads)
    v = split_heads(attention.w_v(x), attention.num_heads)
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    new, total = x.size(1), k.size(2)
    mask = torch.ones(new, total, dtype=torch.bool, device=x.device).tril(diagonal=total - new)
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    return attention.w_o(merge_heads(out)), (k, v)


def _sdpa_cache(attention, x, cache=None):
    b, t, d = x.shape
    h = attention.num_heads

    def heads(y):
        return y.view(b, t, h, d // h).transpose(1, 2)

    q, k, v = heads(attention.w_q(x)), heads(attention.w_k(x)), heads(attention.w_v(x))
    if cache is not None:
        past_k, past_v = cache
        k, v = torch.cat((past_k, k), dim=-2), torch.cat((past_v, v), dim=-2)
    past = k.size(-2) - t
    rows = torch.arange(t, device=x.device)[:, None] + past
    mask = torch.arange(k.size(-2), device=x.device)[None, :] <= rows
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return attention.w_o(y.transpose(1, 2).reshape(b, t, d)), (k, v)


def _einsum_float64(attention, x, cache=None):
    out, (k, v) = attend_with_cache(attention, x, cache)  # for the cache
    q = split_heads(attention.w_q(x), attention.num_heads).double()
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k.double()) / math.sqrt(q.size(-1))
    offset = k.size(2) - x.size(1)
    for i in range(x.size(1)):
        scores[:, :, i, offset + i + 1 :] = NEG_INF
    y = torch.einsum("bhqk,bhkd->bhqd", scores.softmax(-1), v.double()).to(x.dtype)
    return attention.w_o(merge_heads(y)), (k, v)


CACHE_RIGHT = {
    "course.nn's attention and an offset mask": attend_with_cache,
    "F.scaled_dot_product_attention": _sdpa_cache,
    "einsum in float64 with a loop for the mask": _einsum_float64,
}


def _not_appended(attention, x, cache=None):
    out, (k, v) = attend_with_cache(attention, x, cache)
    return out, (k[:, :, -x.size(1) :], v[:, :, -x.size(1) :])


def _mutates_cache(attention, x, cache=None):
    if cache is not None:
        cache[0].mul_(1.0 + 1e-3).div_(1.0 + 1e-3)  # "harmless" arithmetic in place
        cache[1].add_(1.0).sub_(1.0)
    return attend_with_cache(attention, x, cache)


def _no_offset(attention, x, cache=None):
    q = split_heads(attention.w_q(x), attention.num_heads)
    k = split_heads(attention.w_k(x), attention.num_heads)
    v = split_heads(attention.w_v(x), attention.num_heads)
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    mask = torch.ones(x.size(1), k.size(2), dtype=torch.bool, device=x.device).tril()
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    return attention.w_o(merge_heads(out)), (k, v)


def _is_causal(attention, x, cache=None):
    b, t, d = x.shape
    q = split_heads(attention.w_q(x), attention.num_heads)
    k = split_heads(attention.w_k(x), attention.num_heads)
    v = split_heads(attention.w_v(x), attention.num_heads)
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)  # top-left aligned
    return attention.w_o(merge_heads(y)), (k, v)


def _no_mask(attention, x, cache=None):
    q = split_heads(attention.w_q(x), attention.num_heads)
    k = split_heads(attention.w_k(x), attention.num_heads)
    v = split_heads(attention.w_v(x), attention.num_heads)
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    out, _ = scaled_dot_product_attention(q, k, v)
    return attention.w_o(merge_heads(out)), (k, v)


def _new_only(attention, x, cache=None):
    _, new_cache = attend_with_cache(attention, x, cache)
    out, _ = attend_with_cache(attention, x, None)  # attends to this step's tokens only
    return out, new_cache


def _cpu_mask(attention, x, cache=None):
    q = split_heads(attention.w_q(x), attention.num_heads)
    k = split_heads(attention.w_k(x), attention.num_heads)
    v = split_heads(attention.w_v(x), attention.num_heads)
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    new, total = x.size(1), k.size(2)
    mask = torch.ones(new, total, dtype=torch.bool).tril(diagonal=total - new)
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    return attention.w_o(merge_heads(out)), (k, v)


def _prepended(attention, x, cache=None):
    if cache is None:
        return attend_with_cache(attention, x, None)
    _, (k, v) = attend_with_cache(attention, x, None)
    k, v = torch.cat([k, cache[0]], dim=2), torch.cat([v, cache[1]], dim=2)  # new ones first
    q = split_heads(attention.w_q(x), attention.num_heads)
    out, _ = scaled_dot_product_attention(q, k, v)
    return attention.w_o(merge_heads(out)), (k, v)


CACHE_WRONG = {
    "this step's keys before the cached ones": (_prepended, "past ones unchanged"),
    "cache not appended": (_not_appended, "grows by the new tokens"),
    "the cache passed in changed (inputs untouched)": (_mutates_cache, "inputs untouched"),
    "causal mask without the offset": (_no_offset, "recomputed"),
    "is_causal on a cache (top-left aligned)": (_is_causal, "recomputed"),
    "no causal mask among the new tokens": (_no_mask, "recomputed"),
    "attends to the new tokens only": (_new_only, "recomputed"),
    "a mask made on the CPU (device)": (_cpu_mask, "device"),
}


# --- written after the spec runner (by family of mistake), not designed against it --------------


def _loss_shape_one(logits, token_ids, pad_id):  # family 1: a loss of shape (1,)
    loss, _ = lm_loss(logits, token_ids, pad_id)
    return loss.reshape(1), loss.exp()


def _ppl_numpy(logits, token_ids, pad_id):  # family 1: numpy.float32 perplexity
    import numpy as np

    loss, _ = lm_loss(logits, token_ids, pad_id)
    return loss, np.exp(np.float32(loss.item()))


def _filter_numpy_nucleus(logits, temperature=1.0, top_k=None, top_p=None):  # family 2
    import numpy as np

    out = filter_logits(logits, temperature, top_k, None)
    if top_p is None or top_p >= 1:
        return out
    probs = np.asarray(torch.softmax(out, -1).detach())
    order = np.argsort(-probs, axis=-1)
    sorted_probs = np.take_along_axis(probs, order, -1)
    before = np.cumsum(sorted_probs, -1) - sorted_probs
    remove = np.zeros_like(before, dtype=bool)
    np.put_along_axis(remove, order, before >= top_p, -1)
    return out.masked_fill(torch.from_numpy(remove), NEG_INF)


def _filter_returns_numpy(logits, temperature=1.0, top_k=None, top_p=None):  # family 1
    return filter_logits(logits, temperature, top_k, top_p).numpy()


def _rows_as_tensors(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args):
    rows = sample(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args)
    return [torch.tensor(r, dtype=torch.long) for r in rows]  # family 1: not lists of ints


def _one_draw_for_all(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args):
    # family 5: one token drawn per step and given to every row (not independent per row)
    rows, new = [list(p) for p in prompts], [[] for _ in prompts]
    active = list(range(len(prompts)))
    for _ in range(max_new_tokens):
        if not active:
            break
        last = _right_padded(model, [rows[i] for i in active], pad_id)
        probs = torch.softmax(filter_logits(last[:1], **filter_args), dim=-1)
        token = int(torch.multinomial(probs, 1, generator=generator))
        for i in active:
            rows[i].append(token)
            new[i].append(token)
        active = [i for i in active if token != eos_id]
    return new


def _short_range(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args):
    # family 5: draws over ids 0..V-2 only (the last id is never drawn): the id range is wrong
    rows, new = [list(p) for p in prompts], [[] for _ in prompts]
    active = list(range(len(prompts)))
    for _ in range(max_new_tokens):
        if not active:
            break
        last = _right_padded(model, [rows[i] for i in active], pad_id)
        probs = torch.softmax(filter_logits(last, **filter_args), dim=-1)[:, :-1]
        tokens = torch.multinomial(probs, 1, generator=generator).squeeze(1).tolist()
        for i, token in zip(active, tokens, strict=True):
            rows[i].append(token)
            new[i].append(token)
        active = [i for i, t in zip(active, tokens, strict=True) if t != eos_id]
    return new


def _cache_numpy_mask(attention, x, cache=None):  # family 2: a mask through NumPy
    import numpy as np

    q = split_heads(attention.w_q(x), attention.num_heads)
    k = split_heads(attention.w_k(x), attention.num_heads)
    v = split_heads(attention.w_v(x), attention.num_heads)
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    new, total = x.size(1), k.size(2)
    mask = torch.from_numpy(np.tril(np.ones((new, total), dtype=bool), total - new))
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    return attention.w_o(merge_heads(out)), (k, v)


def _cache_as_list(attention, x, cache=None):  # right: a list where the text says a pair
    out, (k, v) = attend_with_cache(attention, x, cache)
    return out, [k, v]


def _filter_reordered(logits, top_k=None, top_p=None, temperature=1.0):  # right: keywords only
    return filter_logits(logits, temperature, top_k, top_p)


def _rows_tolist_loop(model, prompts, max_new_tokens, eos_id, pad_id, generator, **filter_args):
    out = []  # right: one prompt at a time, ids on the model's device, ints from .item()
    device = next(model.parameters()).device
    for prompt in prompts:
        ids, new = list(prompt), []
        for _ in range(max_new_tokens):
            with torch.no_grad():
                logits = model(torch.tensor([ids], device=device))[0, -1]
            probs = torch.softmax(filter_logits(logits, **filter_args), dim=-1)
            token = torch.multinomial(probs, 1, generator=generator).item()
            ids.append(token)
            new.append(token)
            if token == eos_id:
                break
        out.append(new)
    return out


LOSS_WRONG |= {
    "after: a loss of shape (1,) (stated type)": (_loss_shape_one, "shape"),
    "after: perplexity as numpy.float32 (stated type)": (_ppl_numpy, "numpy.float32"),
}
FILTER_RIGHT |= {"parameters in another order, called by keyword": _filter_reordered}
FILTER_WRONG |= {
    "after: the nucleus through NumPy (device)": (_filter_numpy_nucleus, "device"),
    "after: a NumPy array returned (stated type)": (_filter_returns_numpy, "numpy.ndarray"),
}
SAMPLE_RIGHT |= {"a loop per prompt with .item()": _rows_tolist_loop}
SAMPLE_WRONG |= {
    "after: rows as tensors (stated type)": (_rows_as_tensors, "stated return type"),
    "after: one draw shared by every row (independent per row)": (_one_draw_for_all, "own prompt"),
    "after: draws over a range without the last id": (_short_range, "raised"),
}
CACHE_WRONG |= {
    "after: a mask through NumPy (device)": (_cache_numpy_mask, "device"),
}
CACHE_RIGHT |= {"the pair as a list (unpacked the same way)": _cache_as_list}


# --- the tests ----------------------------------------------------------------------------------

CHECKS = {
    "lm_loss": (nb09.lm_loss, LOSS_RIGHT, LOSS_WRONG),
    "filter_logits": (nb09.filter_logits, FILTER_RIGHT, FILTER_WRONG),
    "sample": (nb09.sample, SAMPLE_RIGHT, SAMPLE_WRONG),
    "attend_with_cache": (nb09.attend_with_cache, CACHE_RIGHT, CACHE_WRONG),
}
RIGHT = [(check, name) for check, (_, right, _) in CHECKS.items() for name in right]
WRONG = [(check, name) for check, (_, _, wrong) in CHECKS.items() for name in wrong]


@pytest.mark.parametrize(("check", "name"), RIGHT)
def test_right_variant_passes(check, name):
    function, right, _ = CHECKS[check]
    result = function(right[name], raise_on_failure=False)
    assert result.passed, (name, result.message)


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_stub_is_not_implemented(check):
    assert CHECKS[check][0](stub, raise_on_failure=False).status == "not implemented"


@pytest.mark.parametrize(("check", "name"), WRONG)
def test_wrong_variant_is_rejected_naming_the_property(check, name):
    function, _, wrong = CHECKS[check]
    implementation, phrase = wrong[name]
    try:
        result = function(implementation, raise_on_failure=False)
    finally:
        torch.set_grad_enabled(True)
    assert result.status == "failed", f"{name} was accepted"
    assert phrase in result.message, result.message

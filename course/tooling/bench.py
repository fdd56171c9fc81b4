"""``make bench``: the course's own code side by side with what a user would pick instead.

Two comparisons, each in one process, on the same machine:

1. **Fine-tuning loop vs transformers' ``Trainer``.** The course's loop (``course.nn.fit`` and
   ``train_step`` from notebook 06, fused AdamW) and ``Trainer`` with its defaults, on the same
   model (the packaged MiniLM), the same SST-2 training examples, the same number of steps and
   batch size, the same linear schedule with the same warm-up steps, the same clipping and
   weight-decay rate, and the same precision (float32 for both by default; bf16 autocast for
   both where ``course.env`` turns it on, i.e. with ``COURSE_BF16=1``). Two differences stay:
   ``Trainer`` exempts biases and LayerNorm weights from weight decay (its default) while the
   course loop decays every weight, and each loop groups lengths into batches its own way.
   Both are scored on the SST-2 validation set with the same function, in float32.
2. **Notebook 05's Transformer vs ``torch.nn.Transformer``.** The from-scratch layers of
   ``course.nn`` against PyTorch's own, at the same sizes: one training step (forward,
   backward, AdamW) on the same random batch, both in float32 (no autocast).

A single timing of each side moves with whatever else the machine does in that minute, so
each ratio comes from repeated, interleaved timings: the two sides take turns (A B A B ...),
each round gives one ratio (alternative / course: above 1 means the course's code is
faster), and the printout gives the median of the rounds' ratios with their range (min to
max), wall-clock and process CPU time. A slow spell of the machine then hits both sides of
a round alike. The printout also names the machine and its 1-minute load average before and
after.

Run ``python -m course.tooling.bench [--steps 94] [--rounds 5] [--layer-rounds 21] [--json out.json]``.
``--loop-only`` runs the course loop alone and prints one JSON line (its seconds, CPU seconds,
accuracy, precision and the load average): one run of the precision measurement that chose
float32 as the default (``PRECISION_RUNS`` in ``course/tooling/budgets.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from course import data, env, models

LR, WEIGHT_DECAY, WARMUP_RATIO, MAX_GRAD_NORM, BATCH_SIZE, MAX_LENGTH = 1e-4, 0.01, 0.1, 1.0, 32, 64


def _sst2_examples(tokenizer: Any, n_train: int) -> tuple[list[dict], list[dict]]:
    """The first ``n_train`` shuffled training sentences and the validation set, tokenized."""
    sst2 = data.load_sst2()

    def encode(split: Any) -> list[dict]:
        encoded = tokenizer(list(split["sentence"]), truncation=True, max_length=MAX_LENGTH)
        return [
            {"input_ids": ids, "attention_mask": mask, "labels": label}
            for ids, mask, label in zip(
                encoded["input_ids"], encoded["attention_mask"], split["label"], strict=True
            )
        ]

    pool = sst2["train"].shuffle(seed=0, keep_in_memory=True)
    return encode(pool.select(range(min(n_train, len(pool))))), encode(sst2["validation"])


def _fresh_classifier() -> nn.Module:
    env.seed_everything(0)
    return models.load_model(
        "sequence_classification",
        models.PACKAGED_MODEL,
        num_labels=2,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )


def _course_loop(train: list[dict], val_loader: Any, steps: int, collator: Any) -> dict:
    from course.nn import LengthGroupedBatches, evaluate_accuracy, fit

    model = _fresh_classifier()
    lengths = [len(example["input_ids"]) for example in train]
    loader = torch.utils.data.DataLoader(
        train, batch_sampler=LengthGroupedBatches(lengths, BATCH_SIZE, 0), collate_fn=collator
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, fused=True)
    start, cpu_start = time.perf_counter(), time.process_time()
    fit(
        model,
        loader,
        steps,
        optimizer,
        warmup_ratio=WARMUP_RATIO,
        max_grad_norm=MAX_GRAD_NORM,
        desc="course loop",
    )
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    return {
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "accuracy": evaluate_accuracy(model, val_loader, torch.device("cpu")),
        "precision": env.precision(torch.device("cpu")),
    }


def _trainer(train: list[dict], val_loader: Any, steps: int, collator: Any) -> dict:
    from transformers import Trainer, TrainingArguments

    from course.nn import evaluate_accuracy

    model = _fresh_classifier()
    # The course loop's precision: bf16 autocast exactly where course.env turns it on.
    bf16 = env.autocast_dtype(torch.device("cpu")) is not None
    with tempfile.TemporaryDirectory() as out:
        arguments = TrainingArguments(
            output_dir=out,
            max_steps=steps,
            per_device_train_batch_size=BATCH_SIZE,
            learning_rate=LR,
            weight_decay=WEIGHT_DECAY,
            # fit warms up for int(ratio * steps) steps; a float ratio would make Trainer round up
            warmup_steps=int(WARMUP_RATIO * steps),
            lr_scheduler_type="linear",
            max_grad_norm=MAX_GRAD_NORM,
            train_sampling_strategy="group_by_length",
            save_strategy="no",
            logging_strategy="no",
            report_to="none",
            disable_tqdm=True,
            use_cpu=True,
            bf16=bf16,
            seed=0,
        )
        trainer = Trainer(model=model, args=arguments, train_dataset=train, data_collator=collator)
        start, cpu_start = time.perf_counter(), time.process_time()
        trainer.train()
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    return {
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "accuracy": evaluate_accuracy(model, val_loader, torch.device("cpu")),
        "optimizer": str(getattr(arguments.optim, "value", arguments.optim)),
        "precision": "bf16 autocast" if arguments.bf16 else "float32",
        "warmup_steps": arguments.get_warmup_steps(steps),
    }


def _loop_inputs(steps: int) -> tuple[list[dict], Any, Any]:
    """The training examples of ``steps`` batches, the validation loader and the collator."""
    from transformers import DataCollatorWithPadding

    tokenizer = models.load_tokenizer(models.PACKAGED_MODEL)
    collator = DataCollatorWithPadding(tokenizer)
    train, val = _sst2_examples(tokenizer, steps * BATCH_SIZE)
    order = sorted(range(len(val)), key=lambda i: len(val[i]["input_ids"]))
    val_loader = torch.utils.data.DataLoader(
        val,
        batch_sampler=[order[i : i + 128] for i in range(0, len(order), 128)],
        collate_fn=collator,
    )
    return train, val_loader, collator


def course_loop_only(steps: int = 94) -> dict:
    """The course loop alone, in the precision ``course.env`` picks (``COURSE_BF16``), with the
    1-minute load average at its end: one run of the precision measurement (``PRECISION_RUNS``
    in course/tooling/budgets.py)."""
    train, val_loader, collator = _loop_inputs(steps)
    run = _course_loop(train, val_loader, steps, collator)
    return {**run, "COURSE_BF16": os.environ.get("COURSE_BF16"), "load1": os.getloadavg()[0]}


def spread(values: list[float]) -> dict:
    """The median of ``values`` with their range: ``{"median", "min", "max", "values"}``."""
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "values": list(values),
    }


def loop_vs_trainer(steps: int = 94, rounds: int = 5) -> dict:
    """Both loops on ``steps`` batches of SST-2, ``rounds`` times in turn (course, Trainer,
    course, Trainer, ...), each run on a freshly loaded model; returns every run, the median
    seconds of each side and the rounds' ratios (Trainer / course) as :func:`spread`."""
    train, val_loader, collator = _loop_inputs(steps)
    runs = []
    for _ in range(rounds):
        course = _course_loop(train, val_loader, steps, collator)
        trainer = _trainer(train, val_loader, steps, collator)
        runs.append({"course": course, "trainer": trainer})

    def median_side(side: str) -> dict:
        first = runs[0][side]  # accuracy, precision, optimizer: the same in every round
        return {
            **first,
            "seconds": statistics.median(r[side]["seconds"] for r in runs),
            "cpu_seconds": statistics.median(r[side]["cpu_seconds"] for r in runs),
            "accuracies": [r[side]["accuracy"] for r in runs],
        }

    return {
        "steps": steps,
        "batch_size": BATCH_SIZE,
        "rounds": rounds,
        "runs": runs,
        "course": median_side("course"),
        "trainer": median_side("trainer"),
        "ratio": spread([r["trainer"]["seconds"] / r["course"]["seconds"] for r in runs]),
        "cpu_ratio": spread(
            [r["trainer"]["cpu_seconds"] / r["course"]["cpu_seconds"] for r in runs]
        ),
    }


def _timed_steps(
    step: Callable[[], torch.Tensor], optimizer: torch.optim.Optimizer, count: int
) -> tuple[float, float]:
    """Wall-clock and process CPU seconds of ``count`` training steps, per step."""
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(count):
        optimizer.zero_grad()
        step().backward()
        optimizer.step()
    return (time.perf_counter() - start) / count, (time.process_time() - cpu_start) / count


def interleaved_steps(
    sides: dict[str, tuple[nn.Module, Callable[[], torch.Tensor]]],
    rounds: int,
    steps_per_round: int,
    warmup: int = 3,
) -> dict[str, list[tuple[float, float]]]:
    """Per-step (wall-clock, CPU) seconds of each side, ``rounds`` times, the sides in turn
    (A B A B ...), each round ``steps_per_round`` steps of each, after ``warmup`` steps each."""
    optimizers = {
        name: torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
        for name, (model, _) in sides.items()
    }
    for name, (_, step) in sides.items():
        _timed_steps(step, optimizers[name], warmup)
    timings: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    for _ in range(rounds):
        for name, (_, step) in sides.items():
            timings[name].append(_timed_steps(step, optimizers[name], steps_per_round))
    return timings


def layers_vs_torch(rounds: int = 21, steps_per_round: int = 5) -> dict:
    """One training step of notebook 05's Transformer and of ``nn.Transformer``, same sizes,
    timed in ``rounds`` interleaved rounds; returns the median per-step times and the rounds'
    ratios (torch / course) as :func:`spread`."""
    from course.nn import Transformer, make_causal_mask, make_padding_mask

    vocab, d_model, heads, d_ff, layers, batch, length = 16, 64, 4, 128, 2, 64, 14
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(1, vocab, (batch, length), generator=generator)
    tgt = torch.randint(1, vocab, (batch, length), generator=generator)
    labels = torch.randint(1, vocab, (batch, length), generator=generator)
    torch.manual_seed(0)
    ours = Transformer(vocab, vocab, d_model, heads, d_ff, layers, 0.0, pad_id=0)

    def our_step() -> torch.Tensor:
        return nn.functional.cross_entropy(ours(src, tgt).flatten(0, 1), labels.flatten())

    class TorchSeq2Seq(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.src_embed = nn.Embedding(vocab, d_model)
            self.tgt_embed = nn.Embedding(vocab, d_model)
            self.transformer = nn.Transformer(
                d_model, heads, layers, layers, d_ff, 0.0, batch_first=True, norm_first=True
            )
            self.out = nn.Linear(d_model, vocab)

        def forward(self, s: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            causal = ~make_causal_mask(t.shape[1])[0]  # torch: True = blocked
            hidden = self.transformer(
                self.src_embed(s),
                self.tgt_embed(t),
                tgt_mask=causal,
                src_key_padding_mask=~make_padding_mask(s, 0)[:, 0],
                memory_key_padding_mask=~make_padding_mask(s, 0)[:, 0],
            )
            return self.out(hidden)

    theirs = TorchSeq2Seq()

    def torch_step() -> torch.Tensor:
        return nn.functional.cross_entropy(theirs(src, tgt).flatten(0, 1), labels.flatten())

    sizes = {
        "d_model": d_model,
        "heads": heads,
        "d_ff": d_ff,
        "layers": layers,
        "batch": batch,
        "length": length,
    }
    timings = interleaved_steps(
        {"course": (ours, our_step), "torch": (theirs, torch_step)}, rounds, steps_per_round
    )
    course, theirs_t = timings["course"], timings["torch"]
    return {
        "sizes": sizes,
        "rounds": rounds,
        "steps_per_round": steps_per_round,
        "course_ms": 1000 * statistics.median(wall for wall, _ in course),
        "torch_ms": 1000 * statistics.median(wall for wall, _ in theirs_t),
        "course_cpu_ms": 1000 * statistics.median(cpu for _, cpu in course),
        "torch_cpu_ms": 1000 * statistics.median(cpu for _, cpu in theirs_t),
        "ratio": spread([t[0] / c[0] for c, t in zip(course, theirs_t, strict=True)]),
        "cpu_ratio": spread([t[1] / c[1] for c, t in zip(course, theirs_t, strict=True)]),
    }


def ratio_text(ratio: dict) -> str:
    """A :func:`spread` of ratios in words: "1.05 (0.98 to 1.10)"."""
    return f"{ratio['median']:.2f} ({ratio['min']:.2f} to {ratio['max']:.2f})"


def machine() -> str:
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"{torch.get_num_threads()} torch threads, torch {torch.__version__}, "
        f"precision {env.precision(torch.device('cpu'))}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course.tooling.bench", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--steps", type=int, default=94, help="training steps of batch 32 (94: 3,008 examples)"
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="runs of each loop in part 1, in turn"
    )
    parser.add_argument(
        "--layer-rounds", type=int, default=21, help="rounds of 5 steps of each model in part 2"
    )
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument(
        "--loop-only",
        action="store_true",
        help="only the course loop, printed as one JSON line (the precision measurement)",
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("TQDM_DISABLE", "1")
    if args.loop_only:
        print(json.dumps(course_loop_only(args.steps)))
        return 0
    load_before = os.getloadavg()[0]
    print(f"machine: {machine()}; 1-minute load average {load_before:.2f}", flush=True)
    loop = loop_vs_trainer(args.steps, args.rounds)
    course, trainer = loop["course"], loop["trainer"]
    print(
        f"\n1. fine-tuning, packaged MiniLM, SST-2, {loop['steps']} steps of batch "
        f"{loop['batch_size']}, {loop['rounds']} rounds (course loop, Trainer, in turn)"
    )
    for number, run in enumerate(loop["runs"], 1):
        c, t = run["course"], run["trainer"]
        print(
            f"   round {number}: course {c['seconds']:.1f} s ({c['cpu_seconds']:.1f} s CPU), "
            f"Trainer {t['seconds']:.1f} s ({t['cpu_seconds']:.1f} s CPU), "
            f"ratio {t['seconds'] / c['seconds']:.2f}"
        )
    print(
        f"   course loop (fused AdamW, {course['precision']}): median {course['seconds']:.1f} s "
        f"({course['cpu_seconds']:.1f} s CPU), validation accuracy {course['accuracy']:.1%}"
    )
    print(
        f"   Trainer ({trainer['optimizer']}, {trainer['precision']}): median "
        f"{trainer['seconds']:.1f} s ({trainer['cpu_seconds']:.1f} s CPU), validation accuracy "
        f"{trainer['accuracy']:.1%}"
    )
    print(
        f"   ratio Trainer / course loop, median (min to max): {ratio_text(loop['ratio'])} "
        f"wall-clock, {ratio_text(loop['cpu_ratio'])} CPU (above 1: the course loop is faster)",
        flush=True,
    )
    layers = layers_vs_torch(args.layer_rounds)
    print(
        f"\n2. one training step, notebook 05's Transformer vs torch.nn.Transformer "
        f"({layers['sizes']}), both float32, {layers['rounds']} rounds of "
        f"{layers['steps_per_round']} steps each, in turn"
    )
    print(
        f"   course layers: median {layers['course_ms']:.1f} ms ({layers['course_cpu_ms']:.1f} ms "
        f"CPU); torch.nn.Transformer: median {layers['torch_ms']:.1f} ms "
        f"({layers['torch_cpu_ms']:.1f} ms CPU)"
    )
    print(
        f"   ratio torch / course, median (min to max): {ratio_text(layers['ratio'])} "
        f"wall-clock, {ratio_text(layers['cpu_ratio'])} CPU"
    )
    load_after = os.getloadavg()[0]
    print(f"\n1-minute load average at the end: {load_after:.2f}")
    if args.json:
        figures = {
            "machine": machine(),
            "load1_before": load_before,
            "load1_after": load_after,
            "loop": loop,
            "layers": layers,
        }
        with open(args.json, "w", encoding="utf-8") as file:
            json.dump(figures, file, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

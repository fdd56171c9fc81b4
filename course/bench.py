"""``make bench``: the course's own code side by side with what a user would pick instead.

Two comparisons, each in one process, one after the other, on the same machine:

1. **Fine-tuning loop vs transformers' ``Trainer``.** The course's loop (``course.nn.fit`` and
   ``train_step`` from notebook 06, fused AdamW) and ``Trainer`` with its defaults, on the same
   model (the packaged MiniLM), the same SST-2 training examples, the same number of steps and
   batch size, the same linear schedule with the same warm-up steps, the same clipping and
   weight-decay rate, and the same precision (float32 for both by default; bf16 autocast for
   both where ``course.env`` turns it on, i.e. with ``COURSE_BF16=1``). Two differences stay:
   ``Trainer`` exempts biases and LayerNorm weights from weight decay (its default) while the
   course loop decays every weight, and each loop groups lengths into batches its own way.
   Both are scored on the SST-2 validation set with the same function, in float32. Prints the
   wall-clock and process CPU-time ratios (Trainer / course: above 1 means the course loop is
   faster), both accuracies and each side's precision. Only an idle machine gives a fair ratio:
   under load both figures move, CPU time too.
2. **Notebook 05's Transformer vs ``torch.nn.Transformer``.** The from-scratch layers of
   ``course.nn`` against PyTorch's own, at the same sizes: the median time of one training step
   (forward, backward, AdamW) on the same random batch, wall-clock and process CPU time, both
   in float32 (no autocast).

Run ``python -m course.bench [--steps 94] [--json out.json]``; timings depend on the machine
and on what else runs, so the printout names both. ``--loop-only`` runs the course loop alone
and prints one JSON line (its seconds, CPU seconds, accuracy, precision and the load average):
one run of the precision measurement that chose float32 as the default (README, *Precision*).
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
    1-minute load average at its end: one run of the precision measurement (README, *Precision*;
    ``PRECISION_RUNS`` in course/budgets.py)."""
    train, val_loader, collator = _loop_inputs(steps)
    run = _course_loop(train, val_loader, steps, collator)
    return {**run, "COURSE_BF16": os.environ.get("COURSE_BF16"), "load1": os.getloadavg()[0]}


def loop_vs_trainer(steps: int = 94) -> dict:
    """Both loops on ``steps`` batches of SST-2; returns their seconds, accuracies and ratio."""
    train, val_loader, collator = _loop_inputs(steps)
    course = _course_loop(train, val_loader, steps, collator)
    trainer = _trainer(train, val_loader, steps, collator)
    return {
        "steps": steps,
        "batch_size": BATCH_SIZE,
        "course": course,
        "trainer": trainer,
        "ratio": trainer["seconds"] / course["seconds"],
        "cpu_ratio": trainer["cpu_seconds"] / course["cpu_seconds"],
    }


def _median_step_seconds(
    model: nn.Module, step: Callable[[], torch.Tensor], repeats: int
) -> tuple[float, float]:
    """Median wall-clock and process CPU seconds of one training step (after 3 warm-up steps)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    times, cpu_times = [], []
    for i in range(repeats + 3):  # three warm-up steps
        start, cpu_start = time.perf_counter(), time.process_time()
        optimizer.zero_grad()
        step().backward()
        optimizer.step()
        if i >= 3:
            times.append(time.perf_counter() - start)
            cpu_times.append(time.process_time() - cpu_start)
    return statistics.median(times), statistics.median(cpu_times)


def layers_vs_torch(repeats: int = 20) -> dict:
    """One training step of notebook 05's Transformer and of ``nn.Transformer``, same sizes."""
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
    course_s, course_cpu_s = _median_step_seconds(ours, our_step, repeats)
    torch_s, torch_cpu_s = _median_step_seconds(theirs, torch_step, repeats)
    return {
        "sizes": sizes,
        "course_ms": 1000 * course_s,
        "torch_ms": 1000 * torch_s,
        "course_cpu_ms": 1000 * course_cpu_s,
        "torch_cpu_ms": 1000 * torch_cpu_s,
    }


def machine() -> str:
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"{torch.get_num_threads()} torch threads, torch {torch.__version__}, "
        f"precision {env.precision(torch.device('cpu'))}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course.bench", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--steps", type=int, default=94, help="training steps of batch 32 (94: 3,008 examples)"
    )
    parser.add_argument("--repeats", type=int, default=20, help="timed steps per model in part 2")
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
    print(f"machine: {machine()}")
    loop = loop_vs_trainer(args.steps)
    course, trainer = loop["course"], loop["trainer"]
    print(
        f"\n1. fine-tuning, packaged MiniLM, SST-2, {loop['steps']} steps of batch {loop['batch_size']}"
    )
    print(
        f"   course loop (fused AdamW, {course['precision']}): {course['seconds']:6.1f} s "
        f"({course['cpu_seconds']:.1f} s CPU), "
        f"validation accuracy {course['accuracy']:.1%}"
    )
    print(
        f"   Trainer ({trainer['optimizer']}, {trainer['precision']}): {trainer['seconds']:6.1f} s "
        f"({trainer['cpu_seconds']:.1f} s CPU), "
        f"validation accuracy {trainer['accuracy']:.1%}"
    )
    print(
        f"   ratio Trainer / course loop: {loop['ratio']:.2f} wall-clock, {loop['cpu_ratio']:.2f} CPU "
        "(above 1: the course loop is faster)"
    )
    layers = layers_vs_torch(args.repeats)
    ratio = layers["torch_ms"] / layers["course_ms"]
    cpu_ratio = layers["torch_cpu_ms"] / layers["course_cpu_ms"]
    print(
        f"\n2. one training step, notebook 05's Transformer vs torch.nn.Transformer ({layers['sizes']}), "
        "both float32"
    )
    print(
        f"   course layers: {layers['course_ms']:.1f} ms ({layers['course_cpu_ms']:.1f} ms CPU); "
        f"torch.nn.Transformer: {layers['torch_ms']:.1f} ms ({layers['torch_cpu_ms']:.1f} ms CPU); "
        f"ratio torch / course: {ratio:.2f} wall-clock, {cpu_ratio:.2f} CPU"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as file:
            json.dump({"machine": machine(), "loop": loop, "layers": layers}, file, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

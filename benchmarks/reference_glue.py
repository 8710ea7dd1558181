"""The training loop of transformers' `run_glue_no_trainer.py`, as the benchmark's reference peer.

Issue #8 states its speed target against that script ("about 26 train samples/s" on this kind of
machine). The script itself cannot run here unchanged (its metric comes from `evaluate.load`, which
needs the Hub, and it reads CSV/JSON only), so this file repeats its loop on run_glue's data
pipeline, to measure the reference on the same machine, in the same `make bench` run as ours:

- `Accelerator()` with the launcher's settings, `set_seed(seed)` before the model is loaded;
- dynamic padding with `DataCollatorWithPadding` (multiples of 8 only under mixed precision),
  `DataLoader(shuffle=True)`;
- `torch.optim.AdamW(lr)` with the bias/LayerNorm no-decay groups, its default implementation
  (the for-loop one on CPU), a linear schedule, no gradient clipping;
- per step: `model(**batch)`, `accelerator.backward(loss)`, `optimizer.step()`,
  `lr_scheduler.step()`, `optimizer.zero_grad()` and a tqdm bar; evaluation after every epoch.

It takes run_glue's command line (same files, columns, labels, tokenisation, truncation,
`--max_train_samples`) and writes the same `all_results.json` keys as run_glue (`host_*` included: on a GPU the
peak GPU memory that `make bench-gpu` reports). train_runtime covers
the epoch loop with the evaluations, as in run_glue and benchmarks/trainer_glue.py.

    accelerate launch benchmarks/reference_glue.py <run_glue flags>
"""

import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "examples")]

from transformers import (  # noqa: E402
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    get_scheduler,
)

import run_glue  # noqa: E402
from common.hardware import host_info  # noqa: E402
from common.metrics import load_metric  # noqa: E402


def glue_scores(predictions, references, is_regression, task_name, id2label):
    """run_glue's metrics for a whole evaluation set: the GLUE module (`common/metrics/glue`, loaded by path:
    offline) in the configuration `run_glue.evaluate` uses, with F1 of the class `run_glue.positive_label_id` names.

    Args:
        predictions, references: 1-D numpy arrays, one entry per example (class ids, or floats for regression).
        is_regression: float labels (Pearson/Spearman) instead of class ids.
        task_name: --task_name or None.
        id2label: the model config's {id: label}.

    Returns:
        {"accuracy", "f1"} for 2 classes (fractions), as `run_glue.evaluate` without "samples".
    """
    metric = load_metric("glue", task_name or ("regression" if is_regression else "classification"),
                         keep_in_memory=True)
    return metric.compute(predictions=predictions, references=references, num_labels=len(id2label),
                          pos_label=run_glue.positive_label_id(id2label, task_name))


def main(argv=None):
    args = run_glue.parse_args(argv)
    accelerator = Accelerator()
    if args.seed is not None:
        set_seed(args.seed)
    os.makedirs(args.output_dir, exist_ok=True)

    raw = run_glue.load_raw_datasets(args)
    text_columns, label_column, is_regression, label_list = run_glue.resolve_columns(args, raw)
    config = AutoConfig.from_pretrained(args.model_name_or_path)
    label_to_id = None if is_regression else run_glue.align_labels(args, config, label_list)
    if is_regression:
        config.num_labels = 1
    tokenizer = AutoTokenizer.from_pretrained(args.model_name_or_path)
    model = AutoModelForSequenceClassification.from_pretrained(args.model_name_or_path, config=config)
    train_dataset, eval_dataset, _ = run_glue.preprocess(
        args, raw, tokenizer, text_columns, label_column, label_to_id, accelerator
    )

    multiple = 8 if accelerator.mixed_precision != "no" else None
    collator = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=multiple)
    train_dataloader = DataLoader(
        train_dataset, shuffle=True, collate_fn=collator, batch_size=args.per_device_train_batch_size
    )
    eval_dataloader = DataLoader(eval_dataset, collate_fn=collator, batch_size=args.per_device_eval_batch_size)

    no_decay = ["bias", "LayerNorm.weight"]
    groups = [
        {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
         "weight_decay": args.weight_decay},
        {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)],
         "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=args.learning_rate)
    max_train_steps = int(args.num_train_epochs) * len(train_dataloader)
    lr_scheduler = get_scheduler(
        args.lr_scheduler_type, optimizer=optimizer, num_warmup_steps=args.num_warmup_steps,
        num_training_steps=max_train_steps,
    )
    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler
    )
    num_epochs = math.ceil(max_train_steps / len(train_dataloader))

    progress_bar = tqdm(range(max_train_steps), disable=not accelerator.is_local_main_process)
    tokens = padding = 0
    total_loss, steps = 0.0, 0
    start = time.perf_counter()
    for epoch in range(num_epochs):
        model.train()
        for batch in train_dataloader:
            mask = batch["attention_mask"]
            real = int(mask.sum())
            tokens, padding = tokens + real, padding + mask.numel() - real
            outputs = model(**batch)
            loss = outputs.loss
            total_loss += loss.detach().float().item()
            accelerator.backward(loss)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
            progress_bar.update(1)
            steps += 1
        model.eval()
        predictions, references = [], []
        for batch in eval_dataloader:
            with torch.no_grad():
                outputs = model(**batch)
            logits = outputs.logits.squeeze(-1) if is_regression else outputs.logits.argmax(dim=-1)
            gathered = accelerator.gather_for_metrics((logits, batch["labels"]))
            predictions.append(gathered[0].cpu().numpy())
            references.append(gathered[1].cpu().numpy())
        metrics = glue_scores(np.concatenate(predictions), np.concatenate(references), is_regression,
                              args.task_name, accelerator.unwrap_model(model).config.id2label)
        accelerator.print(f"epoch {epoch}: {metrics}")
    seconds = time.perf_counter() - start

    samples = len(train_dataset) * num_epochs
    results = {f"eval_{k}": v for k, v in metrics.items()}
    results.update({
        "train_steps": steps,
        "train_loss": total_loss / max(steps, 1),
        "train_runtime": round(seconds, 3),
        "train_samples": samples,
        "train_samples_per_second": round(samples / seconds, 3),
        "train_tokens_per_second": round(tokens * accelerator.num_processes / seconds, 3),
        "train_padding_fraction": round(padding / (tokens + padding), 4) if tokens + padding else 0.0,
    })
    results.update(host_info(accelerator))  # as run_glue's: device and its name; on CUDA the peak GPU memory
    if accelerator.is_main_process:
        (Path(args.output_dir) / "all_results.json").write_text(json.dumps(results, indent=2))
        print(f"Results: {results}")
    accelerator.end_training()
    return results


if __name__ == "__main__":
    main()

"""The `transformers.Trainer` peer of examples/run_glue.py, for the benchmark (not a user script).

It takes run_glue's own command line, so both read the same files with the same columns, labels,
tokenisation (`run_glue.preprocess`), truncation and `--max_train_samples`, and writes the same
`all_results.json` keys (eval_accuracy, train_samples_per_second, train_tokens_per_second,
train_padding_fraction, train_runtime, host_*: on a GPU the peak GPU memory). Trainer is left at its own
defaults where run_glue has no equivalent flag (it clips gradients to norm 1.0, and its default optimizer
is fused AdamW), because that is what a user who picks Trainer gets. Flags mapped: batch sizes, lr, weight
decay, epochs, schedule, warmup, seed, --mixed_precision bf16 -> bf16=True, --group_by_length ->
train_sampling_strategy="group_by_length", --optim,
--dataloader_num_workers, --pad_to_multiple_of (through the same collator as run_glue). Evaluation
runs after every epoch as in run_glue (eval_strategy="epoch"), so train_runtime includes it in both.
Metrics come from run_glue's GLUE module (`reference_glue.glue_scores`), nothing from the Hub.

    python benchmarks/trainer_glue.py <run_glue flags>
"""

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from accelerate import PartialState

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "examples"), str(REPO / "benchmarks")]

from reference_glue import glue_scores  # noqa: E402
from transformers import (  # noqa: E402
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
    set_seed,
)

import run_glue  # noqa: E402
from common.hardware import host_info  # noqa: E402


class CountingTrainer(Trainer):
    """Trainer that counts the real and padding tokens of the training batches it steps on."""

    num_tokens = 0
    num_padding = 0

    def training_step(self, model, inputs, *args, **kwargs):
        mask = inputs.get("attention_mask")
        if mask is not None:
            real = int(mask.sum().item())
            self.num_tokens += real
            self.num_padding += mask.numel() - real
        return super().training_step(model, inputs, *args, **kwargs)


def main(argv=None):
    args = run_glue.parse_args(argv)
    os.makedirs(args.output_dir, exist_ok=True)
    state = PartialState()  # run_glue.preprocess only needs `main_process_first`
    raw = run_glue.load_raw_datasets(args)
    text_columns, label_column, is_regression, label_list = run_glue.resolve_columns(args, raw)
    config = AutoConfig.from_pretrained(args.model_name_or_path)
    label_to_id = None if is_regression else run_glue.align_labels(args, config, label_list)
    if is_regression:
        config.num_labels = 1
    tokenizer = AutoTokenizer.from_pretrained(args.model_name_or_path)
    train_dataset, eval_dataset, _ = run_glue.preprocess(
        args, raw, tokenizer, text_columns, label_column, label_to_id, state
    )

    bf16 = args.mixed_precision == "bf16"
    multiple = args.pad_to_multiple_of if args.pad_to_multiple_of is not None else (8 if bf16 else None)
    collator = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=multiple if multiple and multiple > 1 else None)
    training_args = TrainingArguments(
        output_dir=args.output_dir,
        per_device_train_batch_size=args.per_device_train_batch_size,
        per_device_eval_batch_size=args.per_device_eval_batch_size,
        learning_rate=args.learning_rate,
        weight_decay=args.weight_decay,
        num_train_epochs=args.num_train_epochs,
        lr_scheduler_type=args.lr_scheduler_type,
        warmup_steps=args.num_warmup_steps,
        seed=args.seed if args.seed is not None else 42,
        bf16=bf16,
        train_sampling_strategy="group_by_length" if args.group_by_length else "random",
        dataloader_num_workers=args.dataloader_num_workers,
        eval_strategy="epoch",
        save_strategy="no",
        logging_strategy="no",
        report_to="none",
        disable_tqdm=True,
        use_cpu=not torch.cuda.is_available(),
        **({"optim": args.optim} if args.optim != "adamw_torch" else {}),  # else Trainer's own default
    )
    # The classification head is initialised under the seed, as in run_glue (build_accelerator seeds first).
    set_seed(training_args.seed)
    model = AutoModelForSequenceClassification.from_pretrained(args.model_name_or_path, config=config)

    def compute_metrics(prediction):
        logits, labels = prediction
        predictions = np.squeeze(logits) if is_regression else np.argmax(logits, axis=-1)
        return glue_scores(predictions, labels, is_regression, args.task_name, model.config.id2label)

    trainer = CountingTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        data_collator=collator,
        compute_metrics=compute_metrics,
    )
    start = time.perf_counter()
    train_output = trainer.train()
    seconds = time.perf_counter() - start
    metrics = trainer.evaluate()
    tokens, padding = trainer.num_tokens, trainer.num_padding
    results = {
        "eval_accuracy": metrics.get("eval_accuracy"),
        "eval_f1": metrics.get("eval_f1"),
        "train_steps": train_output.global_step,
        "train_loss": train_output.training_loss,
        "train_runtime": round(seconds, 3),
        "train_samples": len(train_dataset) * int(args.num_train_epochs),
        "train_samples_per_second": round(len(train_dataset) * args.num_train_epochs / seconds, 3),
        "trainer_train_samples_per_second": train_output.metrics.get("train_samples_per_second"),
        "train_tokens_per_second": round(tokens / seconds, 3),
        "train_padding_fraction": round(padding / (tokens + padding), 4) if tokens + padding else 0.0,
        "trainer_optim": str(training_args.optim.value if hasattr(training_args.optim, "value")
                             else training_args.optim),
        "trainer_max_grad_norm": training_args.max_grad_norm,
        **host_info(trainer.accelerator),  # as run_glue's: device and its name; on CUDA the peak GPU memory
    }
    if state.is_main_process:
        (Path(args.output_dir) / "all_results.json").write_text(json.dumps(results, indent=2))
        print(f"Results: {results}")
    return results


if __name__ == "__main__":
    main()

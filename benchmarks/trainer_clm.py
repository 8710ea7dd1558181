"""The `transformers.Trainer` peer of examples/run_clm.py, for `make bench-gpu` (not a user script).

As benchmarks/trainer_glue.py does for run_glue, it takes run_clm's own command line and reuses run_clm's own
functions, so both read the same text (`load_raw_datasets`, the same held-out validation split), load the same model
(`load_model_and_tokenizer`: a GGUF file de-quantised to float32 with --gguf_file), and train on the same blocks of
exactly --block_size tokens (`preprocess`, --max_train_samples / --max_eval_samples counting blocks). Trainer is
left at its own defaults where run_clm has no equivalent flag (it clips gradients to norm 1.0; its default optimizer
is fused AdamW), because that is what a user who picks Trainer gets. Flags mapped: batch sizes, lr, weight decay,
--max_train_steps (max_steps) or --num_train_epochs, schedule, warmup, seed, --mixed_precision bf16 -> bf16=True,
--optim, --dataloader_num_workers. Evaluation runs after every epoch as in run_clm (eval_strategy="epoch"), so
train_runtime includes it in both; eval_perplexity is exp(Trainer's eval_loss), the mean of per-batch mean losses
(equal to run_clm's token mean when every evaluation batch is full). --fast_dropout has no Trainer equivalent and
is ignored (SmolLM2 has no dropout to speed up).

Writes `all_results.json` with run_clm's keys: eval_perplexity, train_steps, train_loss, train_runtime (s),
train_samples (blocks), train_samples_per_second, train_tokens_per_second, train_padding_fraction, block_size and
host_* (on a GPU the peak GPU memory, `common.hardware.host_info`).

    accelerate launch benchmarks/trainer_clm.py <run_clm flags>
"""

import json
import math
import os
import sys
import time
from pathlib import Path

import torch
from accelerate import PartialState

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "examples"), str(REPO / "benchmarks")]

from trainer_glue import CountingTrainer  # noqa: E402
from transformers import TrainingArguments, default_data_collator, set_seed  # noqa: E402

import run_clm  # noqa: E402
from common.hardware import host_info  # noqa: E402


class BlockCountingTrainer(CountingTrainer):
    """`CountingTrainer` (real and padding tokens of the training batches) that also counts the blocks trained on."""

    num_samples = 0

    def training_step(self, model, inputs, *args, **kwargs):
        self.num_samples += int(inputs["input_ids"].shape[0])
        return super().training_step(model, inputs, *args, **kwargs)


def main(argv=None):
    args = run_clm.parse_args(argv)
    run_clm.validate_common_args(args)
    os.makedirs(args.output_dir, exist_ok=True)
    state = PartialState()  # run_clm.preprocess only needs `main_process_first`
    seed = args.seed if args.seed is not None else 42
    set_seed(seed)  # as run_clm (setup_run seeds before the model is loaded)
    raw = run_clm.load_raw_datasets(args)
    text_column = run_clm.resolve_text_column(args, raw)
    _, tokenizer, model = run_clm.load_model_and_tokenizer(args)
    block_size = run_clm.resolve_block_size(args.block_size, tokenizer, model.config)
    train_dataset, eval_dataset = run_clm.preprocess(args, raw, tokenizer, text_column, block_size, state)

    training_args = TrainingArguments(
        output_dir=args.output_dir,
        per_device_train_batch_size=args.per_device_train_batch_size,
        per_device_eval_batch_size=args.per_device_eval_batch_size,
        learning_rate=args.learning_rate,
        weight_decay=args.weight_decay,
        num_train_epochs=args.num_train_epochs,
        max_steps=args.max_train_steps if args.max_train_steps else -1,
        lr_scheduler_type=args.lr_scheduler_type,
        warmup_steps=args.num_warmup_steps,
        seed=seed,
        bf16=args.mixed_precision == "bf16",
        dataloader_num_workers=args.dataloader_num_workers,
        eval_strategy="epoch",
        save_strategy="no",
        logging_strategy="no",
        report_to="none",
        disable_tqdm=True,
        use_cpu=not torch.cuda.is_available(),
        **({"optim": args.optim} if args.optim != "adamw_torch" else {}),  # else Trainer's own default
    )
    trainer = BlockCountingTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        data_collator=default_data_collator,
    )
    start = time.perf_counter()
    train_output = trainer.train()
    seconds = time.perf_counter() - start
    metrics = trainer.evaluate()
    tokens, padding = trainer.num_tokens, trainer.num_padding
    samples = trainer.num_samples * state.num_processes
    results = {
        "eval_loss": metrics.get("eval_loss"),
        "eval_perplexity": math.exp(metrics["eval_loss"]) if metrics.get("eval_loss") is not None else None,
        "train_steps": train_output.global_step,
        "train_loss": train_output.training_loss,
        "train_runtime": round(seconds, 3),
        "train_samples": samples,
        "train_samples_per_second": round(samples / seconds, 3),
        "trainer_train_samples_per_second": train_output.metrics.get("train_samples_per_second"),
        "train_tokens_per_second": round(tokens * state.num_processes / seconds, 3),
        "train_padding_fraction": round(padding / (tokens + padding), 4) if tokens + padding else 0.0,
        "block_size": block_size,
        "trainer_optim": str(training_args.optim.value if hasattr(training_args.optim, "value")
                             else training_args.optim),
        "trainer_max_grad_norm": training_args.max_grad_norm,
        **host_info(trainer.accelerator),
    }
    if state.is_main_process:
        (Path(args.output_dir) / "all_results.json").write_text(json.dumps(results, indent=2))
        print(f"Results: {results}")
    return results


if __name__ == "__main__":
    main()

"""Shared building blocks for the task scripts in `examples/`.

One module per concern, a few plain functions each:

- `common.args`: argparse groups with the transformers examples' flag names, and their validation.
- `common.launch`: `Accelerator` construction, logging set-up (quiet start-up), process-group sanity check.
- `common.hardware`: a warning when the requested precision is emulated; the host facts in `all_results.json`.
- `common.errors`: `run_script(main)`, the user's errors as one line from one process (the launcher's root cause).
- `common.data`: loading local CSV/TSV/JSON/JSON Lines/text files into a `DatasetDict` with clear errors.
- `common.dataloaders`: the training, evaluation and prediction DataLoaders, built the same way everywhere.
- `common.streaming`: `--streaming`, training shards read as a stream, packed on the fly, resumable per process.
- `common.sampling`: length-grouped sampling (`--group_by_length`), padding multiples, padding-flag checks.
- `common.optimization`: AdamW with no-decay groups, step arithmetic, the learning-rate scheduler.
- `common.fast_dropout`: `--fast_dropout`, cheaper dropout masks on CPU.
- `common.attention`: `--attn_implementation`, the model's attention kernel (eager, sdpa, ...).
- `common.adapters`: `--use_peft`, LoRA adapters through 🤗 PEFT, parameter counts, the merged save.
- `common.gradient_checkpointing`: `--gradient_checkpointing`, activations recomputed in backward (memory).
- `common.checkpointing`: atomic `step_N`/`epoch_N` checkpoints, `latest`, exact resume arithmetic.
- `common.preemption`: SIGTERM/SIGUSR1 -> checkpoint after the current optimizer step, exit 75.
- `common.run`: `TrainingRun`, the run ceremony around each script's training loop (evaluation every N steps, the
  best model, early stopping).
- `common.accumulation`: the loss of an optimizer step as a mean per example / label token of its whole
  accumulation window on all processes.
- `common.batch_size`: `--auto_find_batch_size`, the per-device batch halved on out-of-memory.
- `common.tracking`: tracker config sanitising and `init_trackers`.
- `common.reporting`: evaluation progress bars, trivial-baseline keys, the end-of-run summary table.
- `common.throughput`: samples/s, non-padding tokens/s, padding fraction.
- `common.saving`: output-dir protection, final model save, `all_results.json`.
- `common.tpu`: re-tying tied weights after `prepare` on XLA.
- `common.metrics`: the project's metrics as 🤗 evaluate modules, loaded by path (`load_metric`).
- `common.tasks`: task knowledge outside the training loops, one module per piece (label alignment,
  prediction files, `--config_overrides`, CoNLL, SQuAD, seq2seq, LM data, ROUGE); its docstring lists them.
- `common.models`: model classes transformers lacks, saved as custom code beside their checkpoints
  (`efficientnet_lite`); its docstring lists them.

Imports inside the package are relative (`from .checkpointing import ...`), so a renamed copy of it works
(tests/unit/test_common_package.py).
"""

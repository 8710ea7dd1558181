"""Shared building blocks for the task scripts in `examples/`.

One module per concern, a few plain functions each:

- `common.args`: argparse groups with the transformers examples' flag names, and their validation.
- `common.launch`: `Accelerator` construction, logging set-up, process-group sanity check.
- `common.data`: loading local CSV/TSV/JSON/JSON Lines/text files into a `DatasetDict` with clear errors.
- `common.optimization`: AdamW with no-decay groups, step arithmetic, the learning-rate scheduler.
- `common.checkpointing`: atomic `step_N`/`epoch_N` checkpoints, `latest`, exact resume arithmetic.
- `common.tracking`: tracker config sanitising and `init_trackers`.
- `common.throughput`: samples/s, non-padding tokens/s, padding fraction.
- `common.saving`: output-dir protection, final model save, `all_results.json`.
- `common.tpu`: re-tying tied weights after `prepare` on XLA.
"""

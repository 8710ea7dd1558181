"""Task knowledge shared by several scripts in `examples/`, one contract per module.

- `common.tasks.seq2seq`: encoder-decoder helpers of run_translation and run_summarization (tokenizer training,
  model loading fitted to the tokenizer, distributed generation).
"""

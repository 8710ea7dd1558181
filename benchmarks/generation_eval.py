"""Paired before/after timing of a seq2seq script's generating evaluation (issue 38 item 1), in one process.

Loads a saved seq2seq model (`--model_dir`: a run_translation / run_summarization `--output_dir`), tokenises the
validation sources as the script does, prepares the model with `accelerate` (so that `--mixed_precision bf16`
autocasts its forward as in the script), and then times, alternately, `--repeats` times each:

- `before`: the evaluation loop as it was until 2026-12-04 (dataset order, `torch.no_grad`, `generate` outside
  `accelerator.autocast()`, so the encoder pass of `generate` ran in fp32 under bf16);
- `after`: `common.tasks.seq2seq.generate_texts` over `build_generation_dataloader` (longest sources first,
  the whole of `generate` under the run's autocast, the KV cache on), texts put back in order.

Reports wall seconds and this process's CPU seconds (user + system, `resource.getrusage`: on a shared, loaded
host the CPU time is the comparable figure), examples and generated tokens per second, and whether the two
paths gave the same texts. Prints one JSON line per timed run and a summary line.

    OMP_NUM_THREADS=1 python benchmarks/generation_eval.py --model_dir /tmp/tr --task translation \\
        --source_file /work/shared/data/multi30k/val.en.gz --max_samples 512 --batch_size 128 \\
        --max_source_length 64 --max_length 64 --mixed_precision bf16 --repeats 2
"""

import argparse
import gzip
import json
import resource
import statistics
import sys
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def read_sources(args):
    if args.task == "translation":
        opener = gzip.open if args.source_file.endswith(".gz") else open
        with opener(args.source_file, "rt", encoding="utf-8") as f:
            texts = [line.rstrip("\n") for line in f]
    else:
        with open(args.source_file, encoding="utf-8") as f:
            texts = [json.loads(line)[args.text_column] for line in f if line.strip()]
    return texts[:args.max_samples]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--task", choices=("translation", "summarization"), required=True)
    parser.add_argument("--source_file", required=True)
    parser.add_argument("--text_column", default="dialogue")
    parser.add_argument("--max_samples", type=int, default=512)
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--max_source_length", type=int, default=64)
    parser.add_argument("--max_length", type=int, default=64)
    parser.add_argument("--mixed_precision", default="no")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)

    import torch
    from accelerate import Accelerator
    from torch.utils.data import DataLoader
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, DataCollatorForSeq2Seq

    from common.tasks import seq2seq

    accelerator = Accelerator(cpu=True, mixed_precision=args.mixed_precision)
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    model = accelerator.prepare(AutoModelForSeq2SeqLM.from_pretrained(args.model_dir).eval())
    sources = read_sources(args)
    encoded = tokenizer(sources, max_length=args.max_source_length, truncation=True)["input_ids"]
    examples = [{"input_ids": ids} for ids in encoded]
    collator = DataCollatorForSeq2Seq(tokenizer, model=model)
    gen_kwargs = {"max_length": args.max_length, "num_beams": 1}

    def before():
        dataloader = accelerator.prepare(DataLoader(examples, batch_size=args.batch_size, collate_fn=collator))
        texts, lengths = [], []
        for batch in dataloader:
            with torch.no_grad():
                generated = accelerator.unwrap_model(model).generate(
                    input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], **gen_kwargs)
            generated = accelerator.gather_for_metrics(
                accelerator.pad_across_processes(generated, dim=1, pad_index=tokenizer.pad_token_id)).cpu()
            lengths += seq2seq.generated_lengths(generated, tokenizer.eos_token_id, tokenizer.pad_token_id)
            texts += seq2seq.decode_texts(tokenizer, generated)
        return texts, lengths

    def after():
        loader_args = types.SimpleNamespace(per_device_eval_batch_size=args.batch_size, dataloader_num_workers=0)
        dataloader, order = seq2seq.build_generation_dataloader(loader_args, examples, collator)
        generations = seq2seq.generate_texts(model, accelerator.prepare(dataloader), accelerator, tokenizer,
                                             gen_kwargs, order)
        return generations.texts, generations.lengths

    padding = {}
    for name, order in (("before", list(range(len(examples)))), ("after", seq2seq.length_sorted_order(examples))):
        lengths = [len(examples[i]["input_ids"]) for i in order]
        batches = [lengths[i:i + args.batch_size] for i in range(0, len(lengths), args.batch_size)]
        padded = sum(max(b) * len(b) for b in batches)
        padding[name] = 1 - sum(lengths) / padded
    warm = collator(examples[:4])  # first calls (oneDNN kernels, allocator) outside the timings
    with torch.no_grad():
        accelerator.unwrap_model(model).generate(input_ids=warm["input_ids"], attention_mask=warm["attention_mask"],
                                                 **gen_kwargs)
    runs, texts = {"before": [], "after": []}, {}
    for repeat in range(args.repeats):
        for name, function in (("before", before), ("after", after)):
            wall, cpu = time.perf_counter(), cpu_seconds()
            texts[name], lengths = function()
            wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
            row = {"path": name, "repeat": repeat, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                   "samples": len(lengths), "generated_tokens": sum(lengths),
                   "samples_per_cpu_s": round(len(lengths) / cpu, 2),
                   "tokens_per_cpu_s": round(sum(lengths) / cpu, 1),
                   "source_padding": round(padding[name], 3)}
            runs[name].append(row)
            print(json.dumps(row), flush=True)
    best = {name: min(r["cpu_s"] for r in rows) for name, rows in runs.items()}
    summary = {"task": args.task, "mixed_precision": args.mixed_precision, "threads": torch.get_num_threads(),
               "samples": len(examples), "batch_size": args.batch_size,
               "cpu_s_before_min": best["before"], "cpu_s_after_min": best["after"],
               "cpu_speedup": round(best["before"] / best["after"], 2),
               "wall_s_before_median": statistics.median(r["wall_s"] for r in runs["before"]),
               "wall_s_after_median": statistics.median(r["wall_s"] for r in runs["after"]),
               "same_texts": texts["before"] == texts["after"],
               "differing_texts": sum(a != b for a, b in zip(texts["before"], texts["after"])),
               "mean_generated_tokens": round(statistics.mean(
                   r["generated_tokens"] for r in runs["after"]) / len(examples), 2)}
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()

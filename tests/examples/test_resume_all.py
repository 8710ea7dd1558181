"""Crash-safe exact resume for every script (issue #7).

Each script is started on one process with `--checkpointing_steps N --resume_from_checkpoint latest` and
stopped twice, each time restarted with the unchanged command:

* SIGTERM at a random step (a preempted job): the script finishes the optimizer step, writes `step_K`,
  exits with 75 (EX_TEMPFAIL) and writes no results;
* the resumed run is then killed (SIGKILL) at a random later optimizer step, or in the middle of writing a later
  checkpoint (which must then be ignored);
* the third start resumes from the last complete checkpoint and finishes.

The run is stopped at the drawn point by construction, not by a watcher racing the training: it is started with
`EXAMPLES_PAUSE_AT` (common/preemption.py), its main process pauses there until a signal comes, and the test sends
the signal only once the run says it is paused (`conftest.start_paused`). The test asserts after each stop that it
landed there: the exact checkpoints on disk, the partial one, the checkpoint each resume starts from.

The final weights must be bit-identical (`torch.equal`, tolerance 0) to those of an uninterrupted run of the
same command (one process, so every operation is replayed in the same order), and the evaluation metrics
equal. The data and tiny models are those of each script's own test module (tests/examples/test_run_*.py).

All slow (`make test-all`, 3 launches each besides the shared uninterrupted run); `make test` keeps
tests/examples/test_preemption.py (SIGTERM, run_glue).

The steps at which a run is stopped are drawn from generators seeded with `RESUME_KILL_SEED` (an integer; a fresh
random seed when unset). Every test prints the seed and every failure names it: rerun with
`RESUME_KILL_SEED=<seed>` to stop at the same steps.
"""

import contextlib
import functools
import os
import pickle
import random
import re
import shutil
import signal
from pathlib import Path

import pytest
import test_run_audio_classification
import test_run_clm
import test_run_fim
import test_run_image_classification
import test_run_instance_segmentation
import test_run_mim
import test_run_mlm
import test_run_multiple_choice
import test_run_ner
import test_run_object_detection
import test_run_qa
import test_run_qa_beam_search
import test_run_semantic_segmentation
import test_run_summarization
import test_run_translation
import test_run_wav2vec2_pretraining
import torch
from filelock import FileLock
from safetensors.torch import load_file

from conftest import build_tiny_bert, launch, read_results, session_shared_dir, start_paused

PREEMPTED_EXIT_CODE = 75
# Timing entries differ between any two runs; everything else in all_results.json is compared.
TIMING = re.compile(r"runtime|per_second|seconds")


def kill_seed():
    """The seed of the stop-step draws: `RESUME_KILL_SEED` when set, else a fresh random 32-bit seed.

    Raises:
        ValueError: naming RESUME_KILL_SEED when it is not an integer.
    """
    value = os.environ.get("RESUME_KILL_SEED", "").strip()
    if not value:
        return random.SystemRandom().randrange(2**32)
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"RESUME_KILL_SEED={value!r}: expected an integer (the seed printed by a previous run).")


KILL_SEED = kill_seed()
SEED_NOTE = (f"stop steps drawn with RESUME_KILL_SEED={KILL_SEED}; rerun with RESUME_KILL_SEED={KILL_SEED} "
             "to stop at the same steps")


@contextlib.contextmanager
def seed_in_failures(name):
    """Prints SEED_NOTE, and adds it to the message of any assertion failing inside (to other errors as a note)."""
    print(f"{name}: {SEED_NOTE}")
    try:
        yield
    except AssertionError as error:
        raise AssertionError(f"{error}\n{SEED_NOTE}") from error
    except Exception as error:
        if hasattr(error, "add_note"):  # Python 3.11+
            error.add_note(SEED_NOTE)
        raise


# ------------------------------------------------------------------ per-script data, models and commands
# Each builder writes its data and model under `directory` and returns (script, command(output_dir),
# checkpointing_steps, files: the paths of its data and model, used by test_eval_parity.py).
# The commands end with `--resume_from_checkpoint latest`: one command for every start.
def ner_setup(directory):
    splits = test_run_ner.write_ner_files(directory, n_eval=37)
    model = build_tiny_bert(directory / "model", [" ".join(w[0] for w in words) for words in splits["train"]])

    def command(out):
        # 240 sentences, 8 per batch, 2 batches per optimizer step: 15 steps per epoch, 45 in all.
        return test_run_ner.common_args(
            model, out, train_file=directory / "train.jsonl", validation_file=directory / "validation.jsonl",
            num_train_epochs=3, gradient_accumulation_steps=2, checkpointing_steps=6, resume_from_checkpoint="latest")

    return "run_ner.py", command, 6, {"model": model, "train": directory / "train.jsonl",
                                          "validation": directory / "validation.jsonl", "splits": splits}


def clm_setup(directory):
    import train_tokenizer

    lines = {"train": test_run_clm.corpus_lines(400, seed=0), "validation": test_run_clm.corpus_lines(150, seed=1)}
    corpus = {}
    for split, split_lines in lines.items():
        corpus[split] = directory / f"{split}.txt"
        corpus[split].write_text("\n".join(split_lines) + "\n")
    train_tokenizer.train_byte_level_bpe([line + "\n" for line in lines["train"]], vocab_size=300,
                                         model_max_length=128, output_dir=directory / "tokenizer")
    corpus["tokenizer"] = directory / "tokenizer"

    def command(out):
        # A GPT-2 from scratch (seeded init): about 44 steps per epoch, 2 epochs.
        return test_run_clm.scratch_args(corpus, out, "--checkpointing_steps", 10,
                                         "--resume_from_checkpoint", "latest")

    return "run_clm.py", command, 10, {**corpus, "validation_lines": lines["validation"]}


def qa_setup(directory):
    train = test_run_qa.write_json(directory / "train.json", test_run_qa.make_squad(100, 1))
    rows = test_run_qa.flatten(test_run_qa.make_squad(15, 2, prefix="v"))
    validation = test_run_qa.write_jsonl(directory / "validation.jsonl", rows)
    more = test_run_qa.flatten(test_run_qa.make_squad(40, 3))
    texts = [row["question"] + " " + row["context"] for row in rows + more]
    model = build_tiny_bert(directory / "model", texts)

    def command(out):
        # 300 questions split into features of 64 tokens, 16 per batch, 2 batches per optimizer step.
        return ["--model_name_or_path", model, "--train_file", train, "--validation_file", validation,
                "--max_train_samples", "160", "--num_train_epochs", "2", "--gradient_accumulation_steps", "2",
                *test_run_qa.TRAIN, "--checkpointing_steps", "4", "--resume_from_checkpoint", "latest",
                "--output_dir", out]

    return "run_qa.py", command, 4, {"model": model, "train": train, "validation": validation}


def qa_beam_search_setup(directory):
    train = test_run_qa.write_json(directory / "train.json", test_run_qa.make_squad(100, 1))
    rows = test_run_qa.flatten(test_run_qa.make_squad(15, 2, prefix="v"))
    validation = test_run_qa.write_jsonl(directory / "validation.jsonl", rows)
    texts = [row["question"] + " " + row["context"] for row in test_run_qa.flatten(test_run_qa.make_squad(100, 1))]
    model = test_run_qa_beam_search.build_tiny_xlnet(directory / "model", texts)

    def command(out):
        # XLNet's beam-search head (dropout 0.1: the RNG state must be restored too); 160 questions split into
        # features of 64 tokens, 16 per batch, 2 batches per optimizer step.
        return ["--model_name_or_path", model, "--train_file", train, "--validation_file", validation,
                "--max_train_samples", "160", "--num_train_epochs", "2", "--gradient_accumulation_steps", "2",
                *test_run_qa_beam_search.TRAIN, "--checkpointing_steps", "4", "--resume_from_checkpoint", "latest",
                "--output_dir", out]

    return "run_qa_beam_search.py", command, 4, {"model": model, "train": train, "validation": validation}


def translation_setup(directory):
    from common.tasks.seq2seq import train_seq2seq_tokenizer

    pairs = {"train": test_run_translation.translation_pairs(320, seed=0),
             "validation": test_run_translation.translation_pairs(test_run_translation.N_VALIDATION, seed=1)}
    data = {split: test_run_translation.write_jsonl(directory / f"{split}.jsonl", p) for split, p in pairs.items()}
    train_seq2seq_tokenizer([text for pair in pairs["train"] for text in pair], directory / "tokenizer",
                            vocab_size=120)
    model = test_run_translation.build_tiny_model(directory / "bart", "bart", directory / "tokenizer")

    def command(out):
        # A tiny BART (dropout 0.1: the RNG state must be restored too), 20 steps per epoch, 2 epochs.
        return test_run_translation.run_args(data, out, "--checkpointing_steps", 8, "--resume_from_checkpoint",
                                             "latest", model_dir=model, epochs=2, learning_rate=1e-2)

    return "run_translation.py", command, 8, {**data, "model": model}


def summarization_setup(directory):
    from transformers import CONFIG_MAPPING, AutoModelForSeq2SeqLM

    from common.tasks.seq2seq import fit_config_to_tokenizer, train_seq2seq_tokenizer

    rows = {"train": test_run_summarization.examples(320, seed=0),
            "validation": test_run_summarization.examples(test_run_summarization.N_VALIDATION, seed=1)}
    data = {split: test_run_summarization.write_csv(directory / f"{split}.csv", r) for split, r in rows.items()}
    tokenizer = train_seq2seq_tokenizer([r[k] for r in rows["train"] for k in ("text", "summary")],
                                        directory / "tokenizer", vocab_size=150)
    config = CONFIG_MAPPING["bart"]()
    config.update_from_string(
        "d_model=32,encoder_ffn_dim=64,decoder_ffn_dim=64,encoder_attention_heads=2,decoder_attention_heads=2,"
        "encoder_layers=2,decoder_layers=2,max_position_embeddings=64,tie_word_embeddings=false")
    fit_config_to_tokenizer(config, tokenizer)
    torch.manual_seed(0)
    data["model"] = directory / "bart"
    AutoModelForSeq2SeqLM.from_config(config).save_pretrained(data["model"])
    tokenizer.save_pretrained(data["model"])

    def command(out):
        # 320 documents, 16 per batch: 20 steps per epoch, 2 epochs.
        return test_run_summarization.run_args(data, out, "--num_train_epochs", 2, "--checkpointing_steps", 8,
                                               "--resume_from_checkpoint", "latest")

    return "run_summarization.py", command, 8, data


def image_classification_setup(directory):
    test_run_image_classification.write_image_folder(directory / "train", per_class=24, seed=0)
    test_run_image_classification.write_image_folder(directory / "validation", per_class=7, seed=1)

    def command(out):
        # A tiny ViT from scratch with random-resized-crop augmentation: 72 images, 8 per batch, 9 steps per epoch.
        return ["--train_dir", directory / "train", "--validation_dir", directory / "validation",
                *test_run_image_classification.TINY_VIT, *test_run_image_classification.COMMON,
                "--num_train_epochs", "4", "--checkpointing_steps", "4", "--resume_from_checkpoint", "latest",
                "--output_dir", out]

    return "run_image_classification.py", command, 4, {"train": directory / "train",
                                                           "validation": directory / "validation"}


def multiple_choice_setup(directory):
    data = test_run_multiple_choice.write_multiple_choice_files(directory)
    model = build_tiny_bert(directory / "model", test_run_multiple_choice.choice_texts())

    def command(out):
        # 160 questions x 4 choices, 8 per batch, 2 batches per optimizer step: 10 steps per epoch, 2 epochs.
        return ["--model_name_or_path", model, *test_run_multiple_choice.data_args(data), "--num_train_epochs", "2",
                "--gradient_accumulation_steps", "2", *test_run_multiple_choice.TRAIN, "--checkpointing_steps", "4",
                "--resume_from_checkpoint", "latest", "--output_dir", out]

    return "run_multiple_choice.py", command, 4, {**data, "model": model}


def mlm_setup(directory):
    corpus = test_run_mlm.write_corpus(directory)

    def command(out):
        # A tiny bare BERT with a new MLM head, 85 blocks of 32 tokens, 8 per batch: 11 steps per epoch, 4 epochs;
        # training masks are a function of (seed, epoch, block), so the resumed part masks as the uninterrupted one.
        return test_run_mlm.base_args(corpus, out, "--checkpointing_steps", 5, "--resume_from_checkpoint", "latest")

    return "run_mlm.py", command, 5, corpus


def fim_setup(directory):
    files = test_run_fim.write_files(directory)

    def command(out):
        # A tiny GPT-2 from scratch, 300 four-line files in blocks of 32 tokens (half rearranged PSM / SPM), 4 per
        # batch: about 33 steps per epoch, 2 epochs; each block's FIM draw is a function of (seed, epoch, block), so
        # the resumed part trains on the blocks of the uninterrupted run.
        return test_run_fim.scratch_args(files, out, "--checkpointing_steps", 10, "--infill_eval_samples", 12,
                                         "--infill_max_new_tokens", 6, "--resume_from_checkpoint", "latest")

    return "run_fim.py", command, 10, files


def semantic_segmentation_setup(directory):
    seg = test_run_semantic_segmentation
    data = {"train": seg.write_pairs(directory / "train", 48, seed=0),
            "validation": seg.write_pairs(directory / "validation", 21, seed=1)}

    def command(out):
        # A tiny SegFormer from scratch (drop path and classifier dropout: the RNG state must be restored too) with
        # joint crop-and-flip augmentation: 48 pairs, 8 per batch, 6 steps per epoch, 4 epochs.
        return ["--train_dir", data["train"], "--validation_dir", data["validation"], *seg.TINY_SEGFORMER,
                *seg.COMMON, "--num_train_epochs", "4", "--checkpointing_steps", "4", "--resume_from_checkpoint",
                "latest", "--output_dir", out]

    return "run_semantic_segmentation.py", command, 4, data


def object_detection_setup(directory):
    data = {"train": test_run_object_detection.write_detection_set(directory / "train", 96, seed=0),
            "validation": test_run_object_detection.write_detection_set(directory / "validation", 30, seed=1)}
    # Dropout 0.1 (the RNG state must be restored too) and the flip / scale / crop augmentation seeded per image.
    model = [arg.replace("dropout=0.0", "dropout=0.1") for arg in test_run_object_detection.TINY_DETR]

    def command(out):
        # A tiny DETR from scratch: 96 images, 8 per batch, 12 steps per epoch, 3 epochs.
        return ["--train_file", data["train"], "--validation_file", data["validation"], *model,
                *test_run_object_detection.COMMON, "--num_train_epochs", "3", "--checkpointing_steps", "5",
                "--resume_from_checkpoint", "latest", "--output_dir", out]

    return "run_object_detection.py", command, 5, data


def instance_segmentation_setup(directory):
    inst = test_run_instance_segmentation
    data = {"train": inst.write_instance_set(directory, 48, seed=1, name="train.json"),
            "validation": inst.write_instance_set(directory, 18, seed=2, name="validation.json")}

    def command(out):
        # A tiny Mask2Former from scratch (its loss samples mask points at random: the RNG state must be restored)
        # with the flip seeded per image: 48 images, 8 per batch, 6 steps per epoch, 3 epochs.
        return ["--train_file", data["train"], "--validation_file", data["validation"], *inst.TINY_MASK2FORMER,
                *inst.COMMON, "--horizontal_flip", "--num_train_epochs", "3", "--checkpointing_steps", "4",
                "--resume_from_checkpoint", "latest", "--output_dir", out]

    return "run_instance_segmentation.py", command, 4, data


def audio_classification_setup(directory):
    from conftest import write_tone_clips

    write_tone_clips(directory / "train", per_class=16, seed=0)
    write_tone_clips(directory / "validation", per_class=7, seed=1)
    # Clips over 0.4 s get a random 0.4 s training window per (seed, epoch, clip): the draws must replay on resume.
    model = [a.replace("hidden_size=32,", "hidden_size=32,hidden_dropout=0.1,")
             for a in test_run_audio_classification.TINY_WAV2VEC2]

    def command(out):
        # A tiny wav2vec2 from scratch (dropout 0.1: the RNG state must be restored too): 48 clips, 8 per batch,
        # 6 steps per epoch, 3 epochs.
        return ["--train_dir", directory / "train", "--validation_dir", directory / "validation", *model,
                *test_run_audio_classification.TRAIN, "--max_length_seconds", "0.4", "--num_train_epochs", "3",
                "--checkpointing_steps", "4", "--resume_from_checkpoint", "latest", "--output_dir", out]

    return "run_audio_classification.py", command, 4, {"train": directory / "train",
                                                           "validation": directory / "validation"}


def wav2vec2_pretraining_setup(directory):
    pretraining = test_run_wav2vec2_pretraining
    pretraining.write_melody_clips(directory / "train", 60, seed=0)
    pretraining.write_melody_clips(directory / "validation", 15, seed=1)

    def command(out):
        # A tiny wav2vec2 from a config (dropout, LayerDrop, Gumbel noise; masks drawn per (seed, epoch, clip)):
        # 60 clips, windows of 2 x 4: 8 steps per epoch, 4 epochs.
        return ["--train_dir", directory / "train", "--validation_dir", directory / "validation", *pretraining.TINY,
                *pretraining.COMMON, "--num_train_epochs", "4", "--checkpointing_steps", "4",
                "--resume_from_checkpoint", "latest", "--output_dir", out]

    return "run_wav2vec2_pretraining.py", command, 4, {"train": directory / "train",
                                                          "validation": directory / "validation"}


def mim_setup(directory):
    test_run_mim.write_pattern_images(directory / "train", 64, seed=0)
    test_run_mim.write_pattern_images(directory / "validation", 18, seed=1)

    def command(out):
        # A tiny ViT from a config (dropout 0.1: the RNG state must be restored too); every image's crop, flip and
        # mask drawn per (seed, epoch, image): 64 images, 8 per batch, 8 steps per epoch, 3 epochs.
        model = [a.replace("intermediate_size=64", "intermediate_size=64,hidden_dropout_prob=0.1")
                 for a in test_run_mim.TINY]
        return ["--train_dir", directory / "train", "--validation_dir", directory / "validation", *model,
                *test_run_mim.COMMON, "--num_train_epochs", "3", "--checkpointing_steps", "5",
                "--resume_from_checkpoint", "latest", "--output_dir", out]

    return "run_mim.py", command, 5, {"train": directory / "train", "validation": directory / "validation"}


SETUPS = {"ner": ner_setup, "clm": clm_setup, "qa": qa_setup, "qa_beam_search": qa_beam_search_setup,
          "translation": translation_setup,
          "summarization": summarization_setup, "image_classification": image_classification_setup,
          "multiple_choice": multiple_choice_setup, "mlm": mlm_setup,
          "semantic_segmentation": semantic_segmentation_setup,
          "object_detection": object_detection_setup, "instance_segmentation": instance_segmentation_setup,
          "audio_classification": audio_classification_setup,
          "wav2vec2_pretraining": wav2vec2_pretraining_setup, "mim": mim_setup, "fim": fim_setup}
# The placeholder `--output_dir` of a shared run's command, written to its recipe (see `uninterrupted_run`).
OUTPUT_DIR_PLACEHOLDER = Path("/__output_dir__")
_RUNS = {}  # this worker's shared runs, by name


def uninterrupted_run(name, tmp_path_factory):
    """SETUPS[name]'s data, tiny model and uninterrupted run, built once per test session, also across pytest-xdist
    workers: the resume tests here compare with the run's output, and test_eval_parity.py evaluates its saved model.

    The first caller builds it under a file lock in the session's temporary root (`pytest-N/`, which the workers
    share) and writes a recipe: the script, its command with `OUTPUT_DIR_PLACEHOLDER` for the output folder,
    checkpointing steps and data files. A caller on another worker waits for the lock and reads the recipe.

    Returns:
        (script, command(output_dir) -> argument list, checkpointing_steps, files, uninterrupted output folder).
    Raises:
        AssertionError: from the launch, when the uninterrupted run fails (the next caller then builds it again).
    """
    if name not in _RUNS:
        folder = session_shared_dir(tmp_path_factory, "uninterrupted") / name
        folder.parent.mkdir(parents=True, exist_ok=True)
        recipe = folder / "recipe.pkl"
        with FileLock(f"{folder}.lock"):
            if not recipe.is_file():
                shutil.rmtree(folder, ignore_errors=True)  # what a failed build left
                (folder / "data").mkdir(parents=True)
                script, command, every, files = SETUPS[name](folder / "data")
                template = [str(arg) for arg in command(OUTPUT_DIR_PLACEHOLDER)]
                assert [str(arg) for arg in command(folder / "out")] == _fill(template, folder / "out"), name
                # `latest` with no checkpoint yet starts from scratch: the same command for every start.
                result = launch(script, command(folder / "out"))
                assert "starting from scratch" in result.stdout
                recipe.write_bytes(pickle.dumps((script, template, every, files)))
            script, template, every, files = pickle.loads(recipe.read_bytes())
        _RUNS[name] = script, functools.partial(_fill, template), every, files, folder / "out"
    return _RUNS[name]


def _fill(template, output_dir):
    return [arg.replace(str(OUTPUT_DIR_PLACEHOLDER), str(output_dir)) for arg in template]


@pytest.fixture
def setup(tmp_path_factory):
    """setup(name) -> (script, command, checkpointing_steps, uninterrupted output folder): `uninterrupted_run`."""
    def get(name):
        script, command, every, _, out = uninterrupted_run(name, tmp_path_factory)
        return script, command, every, out

    return get


# ------------------------------------------------------------------ helpers
def draw_stops(script, every, total):
    """Where the run is stopped, twice: ((sigterm_point, saved), (sigkill_point, resumed_from)), each point an
    `EXAMPLES_PAUSE_AT` value.

    Drawn from `random.Random(f"{KILL_SEED}:{script}:{signal name}")` (the same seed gives the same points for the
    same script; string seeds are hashed with SHA-512, independent of PYTHONHASHSEED):
    - SIGTERM (the first start): after a random optimizer step `t` in [1, total - 1): that step's checkpoint
      `step_t` is saved, then exit 75.
    - SIGKILL (the second start, resumed from `step_t`): half the time after a random optimizer step `s` in
      (t, total) -- after its update, before its checkpoint -- and half the time while the run writes a random
      checkpoint `step_c` (c a multiple of `every`, t < c < total), after `save_state` and before the checkpoint is
      complete: the partial folder must be ignored on resume. Either way the resume starts from the last complete
      checkpoint before the point: `step_t` or a later multiple of `every`.
    """
    assert total > every + 1, f"{script}: {total} steps leave no step after the first checkpoint step_{every}"
    term = random.Random(f"{KILL_SEED}:{script}:SIGTERM").randint(1, total - 2)
    rng = random.Random(f"{KILL_SEED}:{script}:SIGKILL")
    savings = [c for c in range(every, total, every) if c > term]
    if savings and rng.random() < 0.5:
        step = rng.choice(savings)
        point, before = f"saving step_{step}", step - 1
    else:
        step = rng.randint(term + 1, total - 1)
        point, before = f"after_step {step}", step - 1
    resumed_from = max(term, every * (before // every))
    return (f"after_step {term}", f"step_{term}"), (point, f"step_{resumed_from}")


def complete_checkpoints(out):
    """The steps of the complete checkpoints `step_N` in `out` (those holding training_progress.json), sorted."""
    return sorted(int(p.name[5:]) for p in out.glob("step_*") if (p / "training_progress.json").is_file())


def stop_paused(script, command, point, sig, log):
    """Starts `command` paused at `point` (conftest.start_paused), sends `sig` there and waits for the exit.

    Returns:
        (return code, the run's output).
    """
    process = start_paused(script, command, point, log)
    process.send_signal(sig)
    process.wait(timeout=300)
    return process.returncode, log.read_text()


def compare_with_uninterrupted(expected_dir, actual_dir):
    """Bit-identical weights (tolerance 0) and equal results (timings aside)."""
    expected, actual = load_file(expected_dir / "model.safetensors"), load_file(actual_dir / "model.safetensors")
    assert expected.keys() == actual.keys()
    for key in expected:
        assert torch.equal(expected[key], actual[key]), key
    a, b = read_results(expected_dir), read_results(actual_dir)
    for key in a:
        if (key.startswith("eval_") or key == "train_steps") and not TIMING.search(key):
            assert a[key] == b[key], (key, a[key], b[key])
    return a


# ------------------------------------------------------------------ tests
@pytest.mark.slow
@pytest.mark.parametrize("name", list(SETUPS))
def test_sigterm_then_sigkill_then_the_same_command_resumes_exactly(name, setup, tmp_path):
    """One command, started three times: preempted (SIGTERM) at a random step, resumed and killed (SIGKILL) at a
    random later point, resumed again to the end; the result is bit-identical to the uninterrupted run's."""
    with seed_in_failures(name):
        script, command, every, uninterrupted = setup(name)
        total = read_results(uninterrupted)["train_steps"]
        out = tmp_path / "out"
        (term_point, saved), (kill_point, resumed_from) = draw_stops(script, every, total)
        term = int(saved[5:])

        # 1. SIGTERM: the step being trained when the signal came (the paused one) is finished and saved, then
        # exit 75; no later checkpoint, no results.
        code, log = stop_paused(script, command(out), term_point, signal.SIGTERM, tmp_path / "preempted.log")
        assert code == PREEMPTED_EXIT_CODE, log[-3000:]
        assert re.search(rf"Preempted: saved \S*{saved}\b", log), (term_point, log[-3000:])
        assert complete_checkpoints(out) == sorted({*range(every, term + 1, every), term}), term_point
        assert not (out / "all_results.json").exists() and not (out / "model.safetensors").exists()

        # 2. The same command resumes from the preemption's checkpoint and is killed at the drawn later point: no
        # results, the checkpoints before the point and none after it (a partial one when killed while saving).
        code, log = stop_paused(script, command(out), kill_point, signal.SIGKILL, tmp_path / "killed.log")
        assert code == -signal.SIGKILL
        assert f"Resuming from {out / saved}" in log, log[-3000:]
        assert not (out / "all_results.json").exists() and not (out / "model.safetensors").exists()
        before = int(kill_point.split()[1].removeprefix("step_")) - 1
        assert complete_checkpoints(out) == sorted({*range(every, before + 1, every), term}), (kill_point,)
        assert complete_checkpoints(out)[-1] == int(resumed_from[5:])
        if kill_point.startswith("saving"):
            assert (out / f".tmp-{kill_point.split()[1]}").is_dir()  # the partial save the resume must ignore

        # 3. The same command once more: it resumes from the last complete checkpoint and ends where the
        # uninterrupted run ended.
        resumed = launch(script, command(out))
        assert f"Resuming from {out / resumed_from}" in resumed.stdout, (kill_point, resumed.stdout[-3000:])
        assert not list(out.glob(".tmp-*"))
        results = compare_with_uninterrupted(uninterrupted, out)
        metrics = {k: v for k, v in results.items() if k.startswith("eval_")}
        print(f"{name}: SIGTERM at '{term_point}' of {total} steps (exit 75, saved {saved}), SIGKILL at "
              f"'{kill_point}', resumed from {resumed_from}; weights bit-identical; eval metrics equal: {metrics}")

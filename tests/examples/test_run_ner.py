"""End-to-end tests of examples/run_ner.py: `accelerate launch` on 1 and 2 CPU processes, offline, a tiny BERT
built from a config, and a small learnable NER data set written in CoNLL (IOB1 and IOB2) and JSON Lines."""

import itertools
import json
import random
import re
from pathlib import Path

import pytest

import run_ner
from common.metrics import load_metric
from conftest import bf16_autocast_works_on_cpu, build_tiny_bert, launch, read_results

# Entity lexicons: multi-word names give I- tags, long rare words split into several sub-words.
PERSONS = [["john", "smith"], ["mary"], ["kowalczykowski"], ["anna", "bergstrom"], ["peter"], ["oluwaseun", "adeyemi"]]
LOCATIONS = [["paris"], ["new", "york"], ["vladivostok"], ["berlin"], ["rio", "de", "janeiro"]]
ORGANISATIONS = [["reuters"], ["general", "motors"], ["united", "nations"], ["volkswagenwerk"]]
TEMPLATES = [
    "PER visited LOC on monday .",
    "ORG said PER met officials in LOC .",
    "the talks between ORG and ORG ended in LOC .",
    "PER , who works for ORG , lives in LOC .",
    "officials in LOC praised PER yesterday .",
    "PER PER arrived .",  # two adjacent persons: IOB1 marks the second with B-
]
POS = {"PER": "NNP", "LOC": "NNP", "ORG": "NNP", ",": ",", ".": "."}


def make_sentences(n, seed):
    """n sentences as lists of (token, IOB1 tag, IOB2 tag)."""
    rng = random.Random(seed)
    sentences = []
    lexicon = {"PER": PERSONS, "LOC": LOCATIONS, "ORG": ORGANISATIONS}
    for _ in range(n):
        words = []
        previous_type = None
        for slot in rng.choice(TEMPLATES).split():
            if slot in lexicon:
                name = rng.choice(lexicon[slot])
                for i, token in enumerate(name):
                    iob2 = ("B-" if i == 0 else "I-") + slot
                    iob1 = ("B-" if i == 0 and previous_type == slot else "I-") + slot
                    words.append((token.capitalize(), iob1, iob2))
                previous_type = slot
            else:
                words.append((slot, "O", "O"))
                previous_type = None
        sentences.append(words)
    return sentences


def write_ner_files(directory, n_train=240, n_eval=60, n_test=30, seed=0):
    """Writes train/validation/test splits as CoNLL IOB1 (`*.txt`, with -DOCSTART- lines and the 4 CoNLL-2003
    columns), CoNLL IOB2 (`iob2/*.txt`) and JSON Lines (`*.jsonl`, IOB2 tags as strings).

    Returns {"train"/"validation"/"test": [sentences]} where a sentence is a list of (token, iob1, iob2).
    """
    directory = Path(directory)
    (directory / "iob2").mkdir(parents=True, exist_ok=True)
    splits = {"train": make_sentences(n_train, seed), "validation": make_sentences(n_eval, seed + 1),
              "test": make_sentences(n_test, seed + 2)}
    for split, sentences in splits.items():
        iob1_lines, iob2_lines = ["-DOCSTART- -X- -X- O", ""], []
        for s, words in enumerate(sentences):
            if s and s % 25 == 0:
                iob1_lines += ["-DOCSTART- -X- -X- O", ""]
            for token, iob1, iob2 in words:
                pos = POS.get(iob2[2:] or token, "NN")
                iob1_lines.append(f"{token} {pos} I-NP {iob1}")
                iob2_lines.append(f"{token} {pos} B-NP {iob2}")
            iob1_lines.append("")
            iob2_lines.append("")
        (directory / f"{split}.txt").write_text("\n".join(iob1_lines) + "\n")
        (directory / "iob2" / f"{split}.txt").write_text("\n".join(iob2_lines) + "\n")
        with open(directory / f"{split}.jsonl", "w") as f:
            for i, words in enumerate(sentences):
                f.write(json.dumps({"id": str(i), "tokens": [w[0] for w in words], "ner_tags": [w[2] for w in words]}))
                f.write("\n")
    return splits


@pytest.fixture(scope="module")
def ner_data(tmp_path_factory):
    directory = tmp_path_factory.mktemp("ner_data")
    return directory, write_ner_files(directory)


@pytest.fixture(scope="module")
def tiny_ner_bert(tmp_path_factory, ner_data):
    _, splits = ner_data
    texts = [" ".join(w[0] for w in words) for words in splits["train"]]
    return build_tiny_bert(tmp_path_factory.mktemp("tiny_ner_bert"), texts)


def common_args(model, output_dir, **extra):
    args = ["--model_name_or_path", model, "--output_dir", output_dir, "--per_device_train_batch_size", 8,
            "--per_device_eval_batch_size", 16, "--learning_rate", 3e-3, "--num_warmup_steps", 3, "--seed", 7]
    for key, value in extra.items():
        args += [f"--{key}"] + ([] if value is True else [value])
    return args


def num_words(sentences):
    return sum(len(words) for words in sentences)


@pytest.fixture(scope="module")
def untrained_f1(tmp_path_factory, ner_data, tiny_ner_bert):
    """Entity F1 of the randomly initialised model: the script's own evaluation-only path (--max_train_steps 0),
    run in this process through `run_ner.main` to save a launch."""
    from accelerate.state import AcceleratorState

    directory, splits = ner_data
    output_dir = tmp_path_factory.mktemp("ner_untrained")
    try:
        results = run_ner.main([str(a) for a in common_args(
            tiny_ner_bert, output_dir, train_file=directory / "train.jsonl",
            validation_file=directory / "validation.jsonl", max_train_steps=0, overwrite_output_dir=True)])
    finally:
        AcceleratorState._reset_state(True)
    assert not [key for key in results if key.startswith("train_")]  # nothing trained, no train_* key
    assert results["head_newly_initialized"] is True and "classifier.weight" in results["newly_initialized_weights"]
    assert results["eval_words"] == num_words(splits["validation"])
    assert not (Path(output_dir) / "model.safetensors").exists()
    return results["eval_f1"]


@pytest.mark.slow  # a launch; JSON Lines reading is unit-tested, the 2-process test below trains run_ner
def test_train_json_lines_one_process(tmp_path, ner_data, tiny_ner_bert, untrained_f1):
    directory, splits = ner_data
    run = launch("run_ner.py", common_args(tiny_ner_bert, tmp_path, train_file=directory / "train.jsonl",
                                           validation_file=directory / "validation.jsonl", num_train_epochs=2,
                                           return_entity_level_metrics=True))
    results = read_results(tmp_path)
    # The console summary stays short with per-type metrics (about 40 lines in the new-user trial): the overall
    # rows with their baseline, one F1 line for the types; all_results.json keeps every per-type key.
    after = run.stdout.split("***** Summary *****\n", 1)[1].splitlines()
    summary = "\n".join(itertools.takewhile(lambda line: line.startswith("  "), after)) + "\n"
    assert len(summary.splitlines()) <= 12, summary
    assert re.search(r"\n  eval_f1 by type +LOC \d\.\d{4} \(\d+\), ORG \d\.\d{4} \(\d+\), PER \d\.\d{4} "
                     rf"\({results['eval_PER_number']}\)\n", summary), summary
    assert all(f"eval_{t}_{part}" in results for t in ("LOC", "ORG", "PER") for part in ("precision", "recall"))
    assert results["eval_f1"] > max(0.6, untrained_f1 + 0.4), (results["eval_f1"], untrained_f1)
    assert results["eval_words"] == num_words(splits["validation"])
    gold_per = sum(1 for words in splits["validation"] for w in words if w[2] == "B-PER")
    assert results["eval_PER_number"] == gold_per
    config = json.loads((tmp_path / "config.json").read_text())
    assert sorted(config["label2id"]) == ["B-LOC", "B-ORG", "B-PER", "I-LOC", "I-ORG", "I-PER", "O"]
    # The trivial baseline, by hand: "O" (the training set's most frequent tag) on every validation word finds no
    # entity (precision, recall, F1 0) and gets the share of O words right.
    words = [w for sentence in splits["validation"] for w in sentence]
    assert results["baseline"] == "majority class of the training set (O on every word)"
    assert results["eval_baseline_f1"] == 0.0 and results["eval_baseline_recall"] == 0.0
    assert results["eval_baseline_accuracy"] == pytest.approx(sum(w[2] == "O" for w in words) / len(words))
    # README "Using the result": the saved output_dir is a token-classification pipeline, offline; it finds most
    # of the validation names (the model's entity F1 is above 0.6).
    from transformers import pipeline

    tagger = pipeline("token-classification", model=str(tmp_path), aggregation_strategy="simple", device=-1)
    found = gold = 0
    for sentence in splits["validation"][:20]:
        entities = {(e["entity_group"], e["word"].lower()) for e in tagger(" ".join(w[0] for w in sentence))}
        spans, current = [], None
        for token, _, tag in sentence:
            if tag.startswith("B-"):
                current = [tag[2:], [token]]
                spans.append(current)
            elif tag.startswith("I-"):
                current[1].append(token)
        gold += len(spans)
        found += sum((kind, " ".join(tokens).lower()) in entities for kind, tokens in spans)
    assert found / gold > 0.5, (found, gold)


def test_two_processes_conll_iob1_label_all_tokens_and_resume(tmp_path, ner_data, tiny_ner_bert, untrained_f1):
    """2 processes on the IOB1 CoNLL file: learns, scores exactly the validation words, writes test predictions
    in input order; resuming from step_8 ends with the uninterrupted run's weights and metrics."""
    import torch
    from safetensors.torch import load_file

    directory, splits = ner_data
    files = {"train_file": directory / "train.txt", "validation_file": directory / "validation.txt"}
    run_a, run_b = tmp_path / "a", tmp_path / "b"
    extra = dict(**files, test_file=directory / "test.txt", num_train_epochs=3, label_all_tokens=True)
    launch("run_ner.py", common_args(tiny_ner_bert, run_a, checkpointing_steps=8, **extra), num_processes=2)
    results = read_results(run_a)
    # 240 sentences / (8 per batch x 2 processes) = 15 steps per epoch.
    assert results["train_steps"] == 45
    assert results["eval_f1"] > max(0.6, untrained_f1 + 0.4), (results["eval_f1"], untrained_f1)
    assert results["eval_words"] == num_words(splits["validation"])
    assert results["eval_samples"] == len(splits["validation"])
    assert results["predict_samples"] == len(splits["test"])

    written = (run_a / "predict_results.txt").read_text().split("\n\n")
    written = [block.split("\n") for block in written if block.strip()]
    assert len(written) == len(splits["test"])
    for block, words in zip(written, splits["test"]):
        columns = [line.split() for line in block]
        assert [c[0] for c in columns] == [w[0] for w in words]  # input word order
        assert [c[1] for c in columns] == [w[2] for w in words]  # gold, converted to IOB2
    predicted = [[c.split()[2] for c in block] for block in written]
    gold = [[w[2] for w in words] for words in splits["test"]]
    assert results["predict_f1"] == pytest.approx(
        load_metric("seqeval").compute(predictions=predicted, references=gold)["f1"])

    launch("run_ner.py", common_args(tiny_ner_bert, run_b, resume_from_checkpoint=run_a / "step_8", **extra),
           num_processes=2)
    resumed = read_results(run_b)
    assert resumed["train_steps"] == 45
    weights_a, weights_b = load_file(run_a / "model.safetensors"), load_file(run_b / "model.safetensors")
    assert weights_a.keys() == weights_b.keys()
    for name in weights_a:
        torch.testing.assert_close(weights_b[name], weights_a[name], rtol=0, atol=1e-6, msg=name)
    assert resumed["eval_f1"] == results["eval_f1"]


def test_speed_switches_group_by_length_fused_adamw_bf16_learn(tmp_path, ner_data, tiny_ner_bert, untrained_f1):
    """--group_by_length --optim adamw_torch_fused --reuse_cpu_memory (--mixed_precision bf16 where the CPU has it),
    the switches of benchmarks/best_flags.txt that run_ner honours besides --fast_dropout: the model still
    learns, the fused AdamW is the one saved in the checkpoint, and the padding counted over the run is exactly
    that of the length-grouped batches (seed 7, epochs 0 and 1, each batch padded to a multiple of 8 under bf16),
    less than that of the plain shuffle over the same epochs."""
    import torch
    from transformers import AutoTokenizer

    from common.sampling import LengthGroupedSampler

    directory, splits = ner_data
    bf16 = bf16_autocast_works_on_cpu()
    extra = {"mixed_precision": "bf16"} if bf16 else {}
    launch("run_ner.py", common_args(tiny_ner_bert, tmp_path, train_file=directory / "train.jsonl",
                                     validation_file=directory / "validation.jsonl", num_train_epochs=2,
                                     group_by_length=True, optim="adamw_torch_fused", checkpointing_steps=30,
                                     reuse_cpu_memory=True, fast_dropout=True, **extra))
    results = read_results(tmp_path)
    assert results["train_steps"] == 60  # 240 sentences / 8 per batch x 2 epochs
    assert results["eval_f1"] > max(0.6, untrained_f1 + 0.4), (results["eval_f1"], untrained_f1)
    groups = torch.load(tmp_path / "step_30" / "optimizer.bin", weights_only=True)["param_groups"]
    assert all(group["fused"] for group in groups)
    assert results["host_reuse_cpu_memory"] is True  # --reuse_cpu_memory took effect in the launched process
    # --fast_dropout replaced the BERT's dropout modules (embeddings + 3 per layer) and its attention
    assert results["fast_dropout_modules_replaced"] >= 3 and results["fast_dropout_attention_switched"] is True

    tokenizer = AutoTokenizer.from_pretrained(tiny_ner_bert)
    words = [[w[0] for w in sentence] for sentence in splits["train"]]
    lengths = [len(ids) for ids in tokenizer(words, is_split_into_words=True, truncation=True,
                                              max_length=128)["input_ids"]]
    multiple = 8 if bf16 else 1

    def padding(order):
        real = padded = 0
        for start in range(0, len(order), 8):
            batch = [lengths[i] for i in order[start:start + 8]]
            real += sum(batch)
            padded += -(-max(batch) // multiple) * multiple * len(batch)
        return padded - real, real

    sampler = LengthGroupedSampler(lengths, 8, seed=7)
    grouped = [padding(list(sampler)) for _ in range(2)]  # iterating advances the epoch
    pad, real = sum(g[0] for g in grouped), sum(g[1] for g in grouped)
    assert results["train_padding_fraction"] == round(pad / (pad + real), 4)
    shuffled = [padding(torch.randperm(len(lengths), generator=torch.Generator().manual_seed(7 + e)).tolist())
                for e in range(2)]
    assert pad < sum(s[0] for s in shuffled), (pad, shuffled)


@pytest.mark.slow
def test_iob1_and_iob2_files_train_and_score_identically(tmp_path, ner_data, tiny_ner_bert):
    directory, _ = ner_data
    outcomes = []
    for name, folder in (("iob1", directory), ("iob2", directory / "iob2")):
        launch("run_ner.py", common_args(tiny_ner_bert, tmp_path / name, train_file=folder / "train.txt",
                                         validation_file=folder / "validation.txt", max_train_steps=20))
        outcomes.append(read_results(tmp_path / name))
    for key in ("eval_f1", "eval_precision", "eval_recall", "eval_accuracy", "train_loss"):
        assert outcomes[0][key] == outcomes[1][key], key


@pytest.mark.slow  # one process: test_resume_all.py (ner, with accumulation)
def test_resume_with_gradient_accumulation_two_processes(tmp_path, ner_data, tiny_ner_bert):
    from safetensors.torch import load_file

    num_processes = 2

    directory, _ = ner_data
    extra = dict(train_file=directory / "train.jsonl", validation_file=directory / "validation.jsonl",
                 max_train_steps=12, gradient_accumulation_steps=3)
    launch("run_ner.py", common_args(tiny_ner_bert, tmp_path / "a", checkpointing_steps=5, **extra), num_processes)
    launch("run_ner.py", common_args(tiny_ner_bert, tmp_path / "b", resume_from_checkpoint=tmp_path / "a" / "step_5",
                                     **extra), num_processes)
    a, b = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    for name in a:
        assert (a[name] - b[name]).abs().max().item() <= 1e-6, name
    assert read_results(tmp_path / "a")["eval_f1"] == read_results(tmp_path / "b")["eval_f1"]


@pytest.mark.slow
def test_pos_task_reports_accuracy(tmp_path, ner_data, tiny_ner_bert):
    directory, _ = ner_data
    launch("run_ner.py", common_args(tiny_ner_bert, tmp_path, train_file=directory / "train.txt",
                                     validation_file=directory / "validation.txt", task_name="pos",
                                     max_train_steps=30))
    results = read_results(tmp_path)
    assert "eval_f1" not in results
    assert results["eval_accuracy"] > 0.8


@pytest.mark.slow
def test_resume_with_group_by_length_two_processes(tmp_path, ner_data, tiny_ner_bert):
    """--group_by_length on 2 processes with accumulation: resuming from step_5 (mid epoch 0; 8 steps per epoch)
    replays the remaining length-grouped batches of epoch 0 and the new order of epoch 1 exactly."""
    from safetensors.torch import load_file

    directory, _ = ner_data
    extra = dict(train_file=directory / "train.jsonl", validation_file=directory / "validation.jsonl",
                 max_train_steps=12, gradient_accumulation_steps=2, group_by_length=True, optim="adamw_torch_fused")
    launch("run_ner.py", common_args(tiny_ner_bert, tmp_path / "a", checkpointing_steps=5, **extra), 2)
    launch("run_ner.py", common_args(tiny_ner_bert, tmp_path / "b", resume_from_checkpoint=tmp_path / "a" / "step_5",
                                     **extra), 2)
    a, b = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    for name in a:
        assert (a[name] - b[name]).abs().max().item() <= 1e-6, name
    results_a, results_b = read_results(tmp_path / "a"), read_results(tmp_path / "b")
    assert results_a["eval_f1"] == results_b["eval_f1"]
    assert results_a["train_steps"] == results_b["train_steps"] == 12

"""End-to-end tests of examples/run_translation.py, launched with `accelerate launch` as a user would, on 1
and 2 CPU processes, offline: tiny T5, BART and Marian models (2 layers, 32 wide) built from configs, with a
BPE tokenizer trained on a small learnable parallel set made here (a word-for-word "English -> German"
lexicon, names copied unchanged)."""

import gzip
import json
import random
import shutil

import pytest
import torch

from common.tasks import seq2seq
from conftest import assert_generation_speed, bf16_autocast_works_on_cpu, launch, read_results

LEXICON = {
    "the": "der", "red": "rote", "small": "kleine", "dog": "hund", "cat": "katze", "runs": "rennt",
    "sleeps": "schläft", "big": "große", "bird": "vogel", "sings": "singt", "blue": "blaue", "house": "haus",
    "near": "bei", "green": "grüne", "tree": "baum", "eats": "frisst",
}
NAMES = ["anna", "tom", "lea", "max"]
N_VALIDATION = 37  # odd, and not a multiple of 2 processes x 8: the last round of batches is padded
VAL_MAX_TARGET_LENGTH = 24


def translation_pairs(n, seed):
    """`n` (english, german) pairs: 3-6 lexicon words translated word by word, in 40 % of the pairs a
    name that stays the same. Copying the source scores a BLEU near 0; a model that learned the
    lexicon scores far higher."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        source = [rng.choice(list(LEXICON)) for _ in range(rng.randint(3, 6))]
        target = [LEXICON[word] for word in source]
        if rng.random() < 0.4:
            name, index = rng.choice(NAMES), rng.randint(0, len(source))
            source.insert(index, name)
            target.insert(index, name)
        pairs.append((" ".join(source), " ".join(target)))
    return pairs


def write_jsonl(path, pairs):
    path.write_text("".join(json.dumps({"translation": {"en": en, "de": de}}) + "\n" for en, de in pairs))
    return path


def write_text(path, lines):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    directory = tmp_path_factory.mktemp("translation_data")
    pairs = {"train": translation_pairs(640, seed=0), "validation": translation_pairs(N_VALIDATION, seed=1)}
    files = {"pairs": pairs, "tokenizer": directory / "tokenizer"}
    for split, split_pairs in pairs.items():
        files[split] = write_jsonl(directory / f"{split}.jsonl", split_pairs)
        for lang, index in (("en", 0), ("de", 1)):
            files[f"{split}_{lang}"] = write_text(directory / f"{split}.{lang}.gz", [p[index] for p in split_pairs])
    seq2seq.train_seq2seq_tokenizer(
        [text for pair in pairs["train"] for text in pair], files["tokenizer"], vocab_size=120
    )
    return files


TINY_CONFIGS = {
    "t5": "d_model=32,d_ff=64,d_kv=16,num_heads=2,num_layers=2,num_decoder_layers=2,dropout_rate=0.0",
    "bart": "d_model=32,encoder_ffn_dim=64,decoder_ffn_dim=64,encoder_attention_heads=2,decoder_attention_heads=2,"
    "encoder_layers=2,decoder_layers=2,max_position_embeddings=64",
    "marian": "d_model=32,encoder_ffn_dim=64,decoder_ffn_dim=64,encoder_attention_heads=2,decoder_attention_heads=2,"
    "encoder_layers=2,decoder_layers=2,max_position_embeddings=64",
}


def build_tiny_model(path, model_type, tokenizer_dir):
    """A randomly initialised 2-layer, 32-wide `model_type` model whose special-token ids are the
    tokenizer's, saved with its tokenizer to `path` (loadable through --model_name_or_path)."""
    from transformers import CONFIG_MAPPING, AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = CONFIG_MAPPING[model_type]()
    config.update_from_string(TINY_CONFIGS[model_type])
    seq2seq.fit_config_to_tokenizer(config, tokenizer)
    if getattr(config, "decoder_start_token_id", None) is None:
        config.decoder_start_token_id = tokenizer.pad_token_id
    torch.manual_seed(0)
    AutoModelForSeq2SeqLM.from_config(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny_t5(data, tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny_t5"), "t5", data["tokenizer"])


@pytest.fixture(scope="module")
def tiny_bart(data, tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny_bart"), "bart", data["tokenizer"])


def run_args(data, output_dir, *extra, model_dir=None, epochs=8, batch_size=16, learning_rate=5e-3):
    args = ["--model_name_or_path", model_dir] if model_dir is not None else []
    return args + [
        "--train_file", data["train"], "--validation_file", data["validation"],
        "--source_lang", "en", "--target_lang", "de",
        "--max_source_length", 32, "--max_target_length", 32, "--val_max_target_length", VAL_MAX_TARGET_LENGTH,
        "--per_device_train_batch_size", batch_size, "--per_device_eval_batch_size", 8,
        "--learning_rate", learning_rate, "--num_train_epochs", epochs, "--seed", 0,
        "--output_dir", output_dir, *extra,
    ]


def greedy_translations(model_dir, sources, batch_size=8):
    """Greedy translations of `sources` by the model saved in `model_dir`, computed here in one process
    (batches of 8, as the script's evaluation), decoded without special tokens."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval()
    translations = []
    for start in range(0, len(sources), batch_size):
        batch = tokenizer(sources[start:start + batch_size], return_tensors="pt", padding=True)
        with torch.no_grad():
            generated = model.generate(**batch, max_length=VAL_MAX_TARGET_LENGTH, num_beams=1)
        translations += [t.strip() for t in tokenizer.batch_decode(generated, skip_special_tokens=True)]
    return translations


def prediction_lines(output_dir):
    return (output_dir / "generated_predictions.txt").read_text(encoding="utf-8").split("\n")[:-1]


def bleu(predictions, references):
    import sacrebleu

    return sacrebleu.corpus_bleu(predictions, [references]).score


def load_weights(output_dir):
    from safetensors.torch import load_file

    return load_file(str(output_dir / "model.safetensors"))


@pytest.fixture(scope="module")
def untrained_t5(data, tiny_t5, tmp_path_factory):
    """--max_train_steps 0: the model before training, evaluated by the script."""
    output_dir = tmp_path_factory.mktemp("t5_untrained")
    launch("run_translation.py", run_args(data, output_dir, "--max_train_steps", 0, model_dir=tiny_t5))
    return output_dir, read_results(output_dir)


@pytest.mark.slow  # a launch; the two-process test below scores the same metric path
def test_evaluation_only_scores_the_untrained_model_exactly(untrained_t5, tiny_t5, data):
    output_dir, results = untrained_t5
    assert not [key for key in results if key.startswith("train_")]  # nothing trained, no train_* key
    assert not (output_dir / "model.safetensors").exists()
    sources, references = zip(*data["pairs"]["validation"])
    lines = prediction_lines(output_dir)
    # One line per validation pair, in order: the untrained model's own greedy translations.
    assert lines == greedy_translations(tiny_t5, list(sources))
    assert results["eval_samples"] == N_VALIDATION
    assert results["eval_bleu"] == pytest.approx(bleu(lines, list(references)))
    assert results["eval_baseline_bleu"] == pytest.approx(bleu(list(sources), list(references)))
    assert results["eval_bleu"] < 5


@pytest.mark.slow
def test_t5_learns_the_lexicon_on_one_process(untrained_t5, tiny_t5, data, tmp_path):
    # T5 has no position information in cross-attention and only relative biases in self-attention:
    # a 32-wide T5 needs about 600 steps to learn this word order (BART: about 200).
    launch("run_translation.py", run_args(data, tmp_path, model_dir=tiny_t5, epochs=16))
    results = read_results(tmp_path)
    untrained = untrained_t5[1]
    # 16 epochs of 640 pairs in batches of 16.
    assert results["train_steps"] == 16 * 40 and results["train_samples"] == 16 * 640
    assert results["eval_bleu"] > untrained["eval_bleu"] + 20
    assert results["eval_bleu"] > results["eval_baseline_bleu"] + 20
    assert results["eval_chrf"] > untrained["eval_chrf"] + 20
    sources, references = zip(*data["pairs"]["validation"])
    lines = prediction_lines(tmp_path)
    assert lines == greedy_translations(tmp_path, list(sources))
    assert results["eval_bleu"] == pytest.approx(bleu(lines, list(references)))


def source_lengths(model_dir, data):
    """Tokens of each training source as the script counts them: tokenised with its `</s>`, truncated to
    --max_source_length 32 (the attention mask the script sums covers the source side only)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    sources = [en for en, _ in data["pairs"]["train"]]
    return [len(ids) for ids in tokenizer(sources, max_length=32, truncation=True)["input_ids"]]


def source_padding(lengths, orders, batch_size, multiple=1):
    """(padding, real) source tokens when consecutive `batch_size` examples of each order in `orders` (one per
    epoch) are padded to their longest, rounded up to `multiple`."""
    real = padded = 0
    for order in orders:
        for start in range(0, len(order), batch_size):
            batch = [lengths[i] for i in order[start:start + batch_size]]
            real += sum(batch)
            padded += -(-max(batch) // multiple) * multiple * len(batch)
    return padded - real, real


def grouped_orders(lengths, batch_size, epochs):
    """The length-grouped order of each epoch in `epochs`, as the script's sampler draws it with --seed 0."""
    from common.sampling import LengthGroupedSampler

    sampler = LengthGroupedSampler(lengths, batch_size, seed=0)
    orders = []
    for epoch in epochs:
        sampler.set_epoch(epoch)
        orders.append(list(sampler))
    return orders


def padding_fraction(padding_and_real):
    padding, real = padding_and_real
    return round(padding / (padding + real), 4)


# --group_by_length and the fused AdamW in the 2-process run, so that the resume test below checks that
# resuming replays the length-grouped batches exactly. Length-grouped batches teach this lexicon more slowly
# than shuffled ones (measured, seeds 0-2: BLEU 42-60 after 6 epochs shuffled, 4-18 grouped; 59-71 after 10
# epochs grouped), hence 10 epochs.
BART_2PROC_FLAGS = ("--checkpointing_steps", 90, "--group_by_length", "--optim", "adamw_torch_fused")
BART_2PROC_EPOCHS = 10


@pytest.fixture(scope="module")
def bart_two_processes(data, tiny_bart, tmp_path_factory):
    """BART (dropout 0.1) on 2 processes, batches of 8 per process (16 per optimizer step as on one
    process), length-grouped, checkpoints every 90 steps (mid-epoch: 40 steps per epoch)."""
    output_dir = tmp_path_factory.mktemp("bart_2proc")
    args = run_args(data, output_dir, *BART_2PROC_FLAGS, model_dir=tiny_bart, epochs=BART_2PROC_EPOCHS, batch_size=8,
                    learning_rate=1e-2)
    launch("run_translation.py", args, num_processes=2)
    return output_dir, read_results(output_dir)


def test_two_processes_write_one_translation_per_validation_pair(bart_two_processes, tiny_bart, data):
    output_dir, results = bart_two_processes
    sources, references = zip(*data["pairs"]["validation"])
    # 37 pairs in batches of 8 on 2 processes: the sampler repeats 11 pairs to fill the last round, which
    # gather_for_metrics drops; the translations are those of the saved model, in the validation order.
    lines = prediction_lines(output_dir)
    assert len(lines) == N_VALIDATION == results["eval_samples"]
    assert lines == greedy_translations(output_dir, list(sources))
    assert results["eval_bleu"] == pytest.approx(bleu(lines, list(references)))
    # How varied the translations are (issue 37 kind 6), by definition from the written file.
    assert results["eval_distinct_generations"] == len(set(lines)) > N_VALIDATION // 2
    assert results["eval_most_common_generation_share"] == max(map(lines.count, lines)) / len(lines)
    # The generation's speed beside the training figures: examples and new tokens (eos included, no padding) per
    # second of the generation loop; the longest sources were generated first, the file is in validation order.
    assert_generation_speed(results, N_VALIDATION)
    assert results["train_samples_per_second"] > 0
    untrained_bleu = bleu(greedy_translations(tiny_bart, list(sources)), list(references))
    assert results["eval_bleu"] > untrained_bleu + 20
    assert results["eval_bleu"] > results["eval_baseline_bleu"] + 20
    assert results["train_steps"] == BART_2PROC_EPOCHS * 40
    # Both processes group the same batches of 8 and take every other one: together they see every batch
    # of the grouped order of each epoch once (fp32: no rounding of the padded length).
    lengths = source_lengths(tiny_bart, data)
    expected = source_padding(lengths, grouped_orders(lengths, 8, range(BART_2PROC_EPOCHS)), 8)
    assert results["train_padding_fraction"] == padding_fraction(expected)


@pytest.mark.slow  # a 2-process launch; exact resume is kept in make test by run_glue and test_preemption
def test_resume_two_processes_equals_uninterrupted_run(bart_two_processes, tiny_bart, data, tmp_path):
    output_dir, results = bart_two_processes
    # step_180 is 20 steps into epoch 4: resuming skips 20 batches of that epoch, then trains the rest.
    progress = json.loads((output_dir / "step_180" / "training_progress.json").read_text())
    # Beside the position, the checkpoint carries the run's running totals and settings (common/run.py).
    position = {key: progress[key] for key in ("completed_steps", "epoch", "name")}
    assert position == {"completed_steps": 180, "epoch": 4, "name": "step_180"}
    shutil.copytree(output_dir / "step_180", tmp_path / "step_180")
    args = run_args(data, tmp_path, *BART_2PROC_FLAGS, "--resume_from_checkpoint", "latest",
                    model_dir=tiny_bart, epochs=BART_2PROC_EPOCHS, batch_size=8, learning_rate=1e-2)
    launch("run_translation.py", args, num_processes=2)
    expected, actual = load_weights(output_dir), load_weights(tmp_path)
    assert expected.keys() == actual.keys()
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name
    resumed = read_results(tmp_path)
    assert resumed["eval_bleu"] == results["eval_bleu"]
    assert prediction_lines(tmp_path) == prediction_lines(output_dir)
    # train_samples and the padding cover the whole run, the part before the resume included (carried in
    # step_180): the grouped batches of epochs 0-9, 640 pairs each.
    lengths = source_lengths(tiny_bart, data)
    orders = grouped_orders(lengths, 8, range(BART_2PROC_EPOCHS))
    assert resumed["train_steps"] == BART_2PROC_EPOCHS * 40 and resumed["train_samples"] == BART_2PROC_EPOCHS * 640
    assert resumed["train_padding_fraction"] == padding_fraction(source_padding(lengths, orders, 8))


@pytest.mark.slow  # about a minute; run_ner keeps the speed switches in make test (label smoothing runs only here)
def test_speed_switches_group_by_length_fused_adamw_bf16_label_smoothing(data, tiny_bart, tmp_path):
    """--group_by_length --optim adamw_torch_fused --label_smoothing 0.1 (--mixed_precision bf16 where the CPU
    has it) on 1 process: the model still learns the lexicon, the fused AdamW is the one checkpointed, and the
    source padding counted over the run is exactly that of the length-grouped batches (seed 0, epochs 0-15,
    each batch padded to a multiple of 8 under bf16), less than that of the plain shuffle."""
    bf16 = bf16_autocast_works_on_cpu()
    extra = ["--mixed_precision", "bf16"] if bf16 else []
    # 16 epochs: grouped batches learn more slowly (measured BLEU after 8 epochs: 71-74 shuffled, 5-14 grouped
    # in fp32, 38-66 with all these switches; after 16: 77 grouped in fp32, 82-85 with all the switches).
    args = run_args(data, tmp_path, "--group_by_length", "--optim", "adamw_torch_fused", "--label_smoothing", 0.1,
                    "--checkpointing_steps", 320, *extra, model_dir=tiny_bart, epochs=16, learning_rate=1e-2)
    launch("run_translation.py", args)
    results = read_results(tmp_path)
    assert results["train_steps"] == 16 * 40
    assert results["eval_bleu"] > results["eval_baseline_bleu"] + 20, results
    groups = torch.load(tmp_path / "step_320" / "optimizer.bin", weights_only=True)["param_groups"]
    assert len(groups) == 2 and all(group["fused"] for group in groups)

    # Under bf16 the collator pads each batch to a multiple of 8 (common.sampling.padding_multiple).
    lengths, multiple = source_lengths(tiny_bart, data), 8 if bf16 else 1
    grouped = source_padding(lengths, grouped_orders(lengths, 16, range(16)), 16, multiple)
    assert results["train_padding_fraction"] == padding_fraction(grouped)
    # Without --group_by_length, accelerate's seedable sampler draws epoch e as torch.randperm(640) from a
    # generator seeded with --seed + e (a plain run's train_padding_fraction is exactly this one).
    shuffles = [torch.randperm(640, generator=torch.Generator().manual_seed(e)).tolist() for e in range(16)]
    shuffled = source_padding(lengths, shuffles, 16, multiple)
    assert padding_fraction(grouped) < padding_fraction(shuffled) - 0.1, (grouped, shuffled)


@pytest.mark.slow  # tests/unit/test_translation.py checks the same errors in-process
def test_missing_language_key_is_a_clear_error(data, tiny_t5, tmp_path):
    bad = tmp_path / "validation.jsonl"
    rows = [{"translation": {"en": en, "de": de}} for en, de in data["pairs"]["validation"][:5]]
    rows[2] = {"translation": {"en": rows[2]["translation"]["en"], "fr": "le chat"}}
    bad.write_text("".join(json.dumps(row) + "\n" for row in rows))
    args = run_args(data, tmp_path / "out", model_dir=tiny_t5)
    args[args.index("--validation_file") + 1] = bad
    run = launch("run_translation.py", args, check=False)
    assert run.returncode != 0
    # One line, the script's own (common/errors.py), not a traceback.
    assert f"run_translation.py: error: --validation_file {bad} line 3: the translation has no 'de' text" in run.stdout


@pytest.mark.slow
def test_marian_from_scratch_on_gzipped_text_two_processes(data, tmp_path):
    """--model_type marian + --config_overrides + --train_tokenizer_vocab_size, plain .gz parallel text."""
    args = [
        # Marian scales token embeddings by sqrt(d_model) and adds sinusoidal positions of unit size: at
        # d_model=32 with the default init_std 0.02 the positions drown the tokens and learning crawls.
        "--model_type", "marian", "--config_overrides", TINY_CONFIGS["marian"] + ",dropout=0.0,init_std=0.15",
        "--train_tokenizer_vocab_size", 120,
        "--train_source_file", data["train_en"], "--train_target_file", data["train_de"],
        "--validation_source_file", data["validation_en"], "--validation_target_file", data["validation_de"],
        "--source_lang", "en", "--target_lang", "de",
        "--max_source_length", 32, "--max_target_length", 32, "--val_max_target_length", VAL_MAX_TARGET_LENGTH,
        "--per_device_train_batch_size", 8, "--per_device_eval_batch_size", 8,
        "--learning_rate", 5e-3, "--num_warmup_steps", 40, "--num_train_epochs", 12, "--seed", 0,
        "--output_dir", tmp_path,
    ]
    launch("run_translation.py", args, num_processes=2)
    results = read_results(tmp_path)
    sources, references = zip(*data["pairs"]["validation"])
    lines = prediction_lines(tmp_path)
    assert len(lines) == N_VALIDATION
    assert lines == greedy_translations(tmp_path, list(sources))
    assert results["eval_bleu"] > results["eval_baseline_bleu"] + 20
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "marian" and config["d_model"] == 32
    assert config["pad_token_id"] == config["decoder_start_token_id"] == 0 and config["eos_token_id"] == 1
    assert (tmp_path / "tokenizer.json").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("num_processes", [1, 2])
def test_t5_from_config_with_beams_prefix_and_test_file(data, tiny_t5, tmp_path, num_processes):
    """--config_name/--tokenizer_name (new weights), --source_prefix, --num_beams, --pad_to_max_length,
    --no-ignore_pad_token_for_loss and a test split written to predict_generated_predictions.txt."""
    test_pairs = translation_pairs(21, seed=3)
    test_file = write_jsonl(tmp_path / "test.jsonl", test_pairs)
    args = run_args(
        data, tmp_path / "out", "--config_name", tiny_t5, "--tokenizer_name", tiny_t5, "--source_prefix", "en-de: ",
        "--num_beams", 2, "--pad_to_max_length", "--no-ignore_pad_token_for_loss", "--test_file", test_file,
        batch_size=16 // num_processes, epochs=16,
    )
    launch("run_translation.py", args, num_processes=num_processes)
    results = read_results(tmp_path / "out")
    # Measured 18.5 (1 process): padding counted in the loss slows learning; copying the source scores 0.6.
    assert results["eval_bleu"] > results["eval_baseline_bleu"] + 10
    assert results["predict_samples"] == 21 and results["predict_bleu"] > 10
    lines = (tmp_path / "out" / "predict_generated_predictions.txt").read_text().split("\n")[:-1]
    assert len(lines) == 21
    assert results["predict_bleu"] == pytest.approx(bleu(lines, [de for _, de in test_pairs]))
    # Every source was padded to --max_source_length 32: padding = 32 - its real tokens (prefix included).
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_t5)
    real = sum(len(tokenizer("en-de: " + en)["input_ids"]) for en, _ in data["pairs"]["train"])
    assert results["train_padding_fraction"] == pytest.approx(1 - real / (640 * 32), abs=1e-4)

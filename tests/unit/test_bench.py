"""Unit tests of benchmarks/bench.py's per-script sections: every flag a section passes is one its script accepts
(parsed by the script's own `parse_args`, nothing launched), the plain run of a section is its reference, and the
table shows each script's eval metric."""

import importlib
import json
import sys
from pathlib import Path

import pytest

from conftest import SHARED_DATA

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # bench.py is a benchmarks/ module
import bench  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

# The sections of the scripts other than run_glue, with the section function's extra arguments.
SECTIONS = {
    "clm": lambda out: bench.clm_configs(48, out),
    "qa": lambda out: bench.qa_configs(8, out),
    "translation": lambda out: bench.translation_configs(160),
    "summarization": lambda out: bench.summarization_configs(16),
    "image": lambda out: bench.image_configs(160, out),
    "mim": lambda out: bench.mim_configs(160, out),
    "inst": lambda out: bench.inst_configs(16, out),
    "fim": lambda out: bench.fim_configs(16, out),
    "qa_beam": lambda out: bench.qa_beam_configs(8, out),
}


@pytest.mark.slow  # importing run_clm / run_image_classification takes about 10 s each on the loaded 2 cores
@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="needs the shared data (SHARED_DATA_DIR)")
@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_section_flags_are_accepted_by_the_script(section, tmp_path, monkeypatch):
    # The prepared inputs (tokenizer, splits, image folders) are not built here: only the flags are checked.
    monkeypatch.setattr(bench, "prepared", lambda path, command: Path(path))
    monkeypatch.setattr(bench, "model_path", lambda: str(tmp_path / "model"))
    monkeypatch.setattr(bench, "xlnet_from_scratch", lambda path, train_file: Path(path))
    configs = SECTIONS[section](tmp_path)
    names = [c[0] for c in configs]
    assert names[0] == f"{section}_plain" and names[-1] == f"{section}_all"
    assert names == ["mim_plain", "mim_bf16_sdpa", "mim_all"] if section == "mim" else len(names) == 2
    for name, group, script, processes, threads, dynamo, extra, notes in configs:
        assert group == section and (REPO / script).is_file()
        if section in ("clm", "image", "mim", "inst", "fim"):  # refused by these scripts' main(), after parse_args:
            # no padding there
            assert "--group_by_length" not in extra and "--pad_to_multiple_of" not in extra
        module = importlib.import_module(Path(script).stem)
        args = module.parse_args(extra + ["--output_dir", str(tmp_path / name)])
        if name.endswith("_all"):
            assert args.mixed_precision == "bf16" and args.optim == "adamw_torch_fused"
            eager = section in ("mim", "translation", "summarization")  # bf16 sdpa is slow for their heads
            assert args.attn_implementation == ("eager" if eager else None)
        elif name == "mim_bf16_sdpa":  # the former best row, kept beside it
            assert args.mixed_precision == "bf16" and args.attn_implementation is None
        else:
            assert args.mixed_precision is None or args.mixed_precision == "no"
            assert args.optim == "adamw_torch" and not args.fast_dropout and not args.group_by_length


def test_metric_text_shows_each_scripts_metric():
    assert bench.metric_text({"eval_accuracy": 0.6842, "eval_f1": 0.81}) == "acc 0.684"
    assert bench.metric_text({"eval_f1": 0.0123}) == "F1 0.012"
    assert bench.metric_text({"eval_exact_match": 26.6, "eval_f1": 43.25}) == "EM 26.6 / F1 43.2"
    assert bench.metric_text({"eval_perplexity": 109.24}) == "ppl 109.2"
    assert bench.metric_text({"eval_bleu": 32.346, "eval_accuracy": None}) == "BLEU 32.35"
    assert bench.metric_text({"eval_rouge1": 2.9}) == "ROUGE-1 2.90"
    assert bench.metric_text({"eval_bleu": 0.24, "eval_samples_per_second": 80.46,
                              "eval_generated_tokens_per_second": 1203.4}) == (
        "BLEU 0.24; eval 80.5 samples/s, 1203 tokens/s")
    assert bench.metric_text({"eval_mean_iou": 0.5}) == "mIoU 0.500"
    assert bench.metric_text({"eval_map_50": 0.25}) == "mAP@0.5 0.250"
    mim = {"eval_loss": 0.2314, "eval_baseline_loss": 0.4221}
    assert bench.metric_text(mim) == "masked L1 0.231 (mean pixel 0.422)"
    assert bench.metric_text({"eval_loss": 0.5, "eval_perplexity": 1.65}) == "ppl 1.6"  # run_clm's eval_loss: not L1
    assert bench.metric_text({}) == "-"


def row(name, group, samples_per_s, **extra):
    """A table row as `summarize` writes it, for a run without FLOP count (seq2seq and image sections)."""
    return {"name": name, "group": group, "processes": 1, "threads": 2, "precision": "fp32", "samples_per_s":
            samples_per_s, "tokens_per_s": 0.0, "padding_fraction": 0.0, "gflops_per_s": None, "mfu": None,
            "peak_rss_mib": 900, "other_load": 0.0, "notes": "", "recompiles": 0, **extra}


def test_table_ratio_is_against_the_sections_plain_run():
    rows = [row("image_plain", "image", 500.0, eval_accuracy=0.9), row("image_all", "image", 750.0,
            eval_accuracy=0.91), row("clm_plain", "clm", 40.0, eval_perplexity=300.0)]
    chosen = bench.best_runs(rows, 0.2)
    reference = {"image": 500.0, "clm": 40.0}
    lines = bench.markdown_table(chosen, reference).splitlines()
    image_all = next(line for line in lines if line.startswith("| image_all "))
    cells = [c.strip() for c in image_all.split("|")[1:-1]]
    assert cells[2:4] == ["750.0", "1.50"] and cells[7:9] == ["-", "-"] and cells[10] == "acc 0.910"


def test_fp32_only_host_runs_the_best_rows_without_bf16():
    # Issue 18: acceptance runs use best_flags.txt "minus --mixed_precision on fp32-only hosts"; rows that measure
    # bf16 itself keep it. Found on 2026-12-01: on this machine (AVX512 without AVX512-BF16) mc_all with bf16 ran
    # at 0.46x plain fp32 while the table called it the best configuration.
    configs = bench.glue_configs("switches", 800, [])
    adapted = {c[0]: c for c in bench.for_this_host(configs, bf16_native=False)}
    original = {c[0]: c for c in configs}
    for name in ("all", "all_but_fast_dropout", "all_workers_2", "all_compile"):
        assert "--mixed_precision" not in adapted[name][6], name
        assert [f for f in original[name][6] if f not in ("--mixed_precision", "bf16")] == adapted[name][6], name
        assert "fp32-only host" in adapted[name][7]
    for name in ("bf16", "bf16_no_pad8", "bf16_fast_dropout"):
        assert adapted[name] == original[name], name
    assert bench.for_this_host(configs, bf16_native=True) == configs


# ---- section `peers`: transformers' own scripts against ours (issue 38, item 0)


def test_mrpc_to_csv_keeps_the_text_and_labels_of_the_first_pairs(tmp_path):
    # GLUE's MRPC .tsv: a BOM, and quotes that are part of the text (csv's default quoting would eat them).
    tsv = tmp_path / "train.tsv"
    tsv.write_text("\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                   '1\t1\t2\tHe said " yes " , twice .\tHe said yes .\n'
                   "0\t3\t4\tA, b\tc\n"
                   "1\t5\t6\tthird\tpair\n", encoding="utf-8")
    assert bench.mrpc_to_csv(tsv, tmp_path / "out.csv", limit=2) == 2
    import csv

    with open(tmp_path / "out.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows == [{"sentence1": 'He said " yes " , twice .', "sentence2": "He said yes .", "label": "1"},
                    {"sentence1": "A, b", "sentence2": "c", "label": "0"}]
    tsv.write_text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\nyes\t1\t2\ta\tb\n")
    with pytest.raises(ValueError, match="train.tsv, line 2"):
        bench.mrpc_to_csv(tsv, tmp_path / "bad.csv")


def test_conll_and_squad_and_swag_conversions(tmp_path):
    conll = tmp_path / "train.txt"
    conll.write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\nPeter NNP B-NP B-PER\n"
                     "Blackburn NNP I-NP I-PER\n\nThird NN B-NP O\n")
    assert bench.conll_to_jsonl(conll, tmp_path / "ner.json", limit=2) == 2
    lines = [json.loads(line) for line in (tmp_path / "ner.json").read_text().splitlines()]
    assert lines == [{"tokens": ["EU", "rejects"], "ner_tags": ["B-ORG", "O"]},
                     {"tokens": ["Peter", "Blackburn"], "ner_tags": ["B-PER", "I-PER"]}]

    squad = {"data": [{"title": "T", "paragraphs": [{"context": "Paris is in France.", "qas": [
        {"id": "q1", "question": "Where?", "answers": [{"text": "France", "answer_start": 12}]},
        {"id": "q2", "question": "What?", "answers": [{"text": "Paris", "answer_start": 0}]}]}]}]}
    (tmp_path / "squad.json").write_text(json.dumps(squad))
    assert bench.squad_to_flat(tmp_path / "squad.json", tmp_path / "peer.json", tmp_path / "ours.jsonl", 1) == 1
    peer = json.loads((tmp_path / "peer.json").read_text())["data"]  # load_dataset("json", field="data")
    ours = [json.loads(line) for line in (tmp_path / "ours.jsonl").read_text().splitlines()]
    assert peer == ours == [{"id": "q1", "title": "T", "context": "Paris is in France.", "question": "Where?",
                             "answers": {"text": ["France"], "answer_start": [12]}}]
    assert peer[0]["context"][12:18] == "France"

    (tmp_path / "cosmos.csv").write_text("id,context,question,answer0,answer1,answer2,answer3,label\n"
                                         'x,"A, context",Why?,a,b,c,d,2\ny,ctx,How?,e,f,g,h,0\n')
    assert bench.cosmos_to_swag(tmp_path / "cosmos.csv", tmp_path / "swag.csv") == 2
    import csv

    with open(tmp_path / "swag.csv", newline="") as f:
        first = next(csv.DictReader(f))
    assert first == {"sent1": "A, context", "sent2": "Why?", "ending0": "a", "ending1": "b", "ending2": "c",
                     "ending3": "d", "label": "2"}


def test_multi30k_pairs_become_translation_records_and_misaligned_files_are_refused(tmp_path):
    import gzip

    def write(name, lines):
        with gzip.open(tmp_path / name, "wt", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))

    write("train.en.gz", ["A dog.", "Two men, one \"ball\"."])
    write("train.de.gz", ["Ein Hund.", "Zwei Männer, ein „Ball“."])
    assert bench.multi30k_to_jsonl(tmp_path / "train.en.gz", tmp_path / "train.de.gz", tmp_path / "t.json", 1) == 1
    assert bench.multi30k_to_jsonl(tmp_path / "train.en.gz", tmp_path / "train.de.gz", tmp_path / "all.json") == 2
    records = [json.loads(line) for line in (tmp_path / "all.json").read_text(encoding="utf-8").splitlines()]
    assert records == [{"translation": {"en": "A dog.", "de": "Ein Hund."}},
                       {"translation": {"en": "Two men, one \"ball\".", "de": "Zwei Männer, ein „Ball“."}}]
    write("val.de.gz", ["Ein Hund."])
    with pytest.raises(ValueError, match=r"train\.en\.gz has 2 lines but .*val\.de\.gz has 1"):
        bench.multi30k_to_jsonl(tmp_path / "train.en.gz", tmp_path / "val.de.gz", tmp_path / "x.json")


def test_peer_metrics_folder_links_every_metric_the_peers_load(tmp_path):
    folder = bench.peer_metrics_folder(tmp_path / "metrics")
    bench.peer_metrics_folder(tmp_path / "metrics")  # a second time: the links are replaced, no error
    for name in bench.PEER_METRICS:
        link = folder / name
        source = REPO / ("benchmarks/peer_metrics" if name in bench.PEER_METRIC_OVERRIDES else "common/metrics")
        assert link.is_symlink() and link.resolve() == (source / name).resolve()
        assert (link / f"{name}.py").is_file()  # what evaluate.load(name) imports from a local folder
    # every evaluate.load("...") of the peers that bench runs is among the links
    import re

    for script in ("text-classification/run_glue_no_trainer.py", "token-classification/run_ner_no_trainer.py",
                   "question-answering/run_qa_no_trainer.py", "multiple-choice/run_swag_no_trainer.py",
                   "translation/run_translation_no_trainer.py"):
        path = bench.PEERS / script
        if not path.is_file():
            pytest.skip(f"{path} not present")
        names = set(re.findall(r'evaluate\.load\(\s*"(\w+)"', path.read_text()))
        assert names and names <= set(bench.PEER_METRICS), (script, names)


def test_peer_seqeval_has_the_hub_keys_and_our_numbers():
    """The ner peer reads `overall_*` (and per-type dicts); the bench's module gives them, equal to
    common/metrics/seqeval's values on sentences with a miss, a false entity, a wrong type and an I- start."""
    import evaluate

    references = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG", "I-ORG", "O"], ["B-MISC", "O", "O"]]
    predictions = [["B-PER", "I-PER", "O", "O"], ["B-LOC", "I-ORG", "I-ORG", "B-PER"], ["I-MISC", "O", "O"]]
    peer = evaluate.load(str(REPO / "benchmarks" / "peer_metrics" / "seqeval"), keep_in_memory=True)
    ours = evaluate.load(str(REPO / "common" / "metrics" / "seqeval"), keep_in_memory=True)
    got = peer.compute(predictions=predictions, references=references)
    want = ours.compute(predictions=predictions, references=references, return_entity_level_metrics=True)
    for key in ("precision", "recall", "f1", "accuracy"):
        assert got[f"overall_{key}"] == pytest.approx(want[key]), key
    assert got["PER"] == {"precision": pytest.approx(0.5), "recall": 1.0, "f1": pytest.approx(2 / 3), "number": 1}
    for entity_type in ("PER", "LOC", "ORG", "MISC"):
        assert got[entity_type]["f1"] == pytest.approx(want[f"{entity_type}_f1"]), entity_type
    # by hand: gold PER, LOC, ORG (I-ORG I-ORG after B-LOC), MISC; predicted PER, LOC, ORG, PER, MISC: 3 correct
    assert got["overall_precision"] == pytest.approx(3 / 5) and got["overall_recall"] == pytest.approx(3 / 4)


def test_peer_sacrebleu_has_the_hub_keys_and_our_bleu():
    """The translation peer reads `score`; the bench's module gives it, equal to common/metrics/sacrebleu's `bleu`,
    with sacreBLEU's n-gram counts (by hand for a 6-token hypothesis against its reference minus one word)."""
    import evaluate

    predictions = ["the cat sat on the mat", "a dog runs in the park today", "hello"]
    references = [["the cat sat on a mat"], ["a dog runs in the park"], ["hello world"]]
    peer = evaluate.load(str(REPO / "benchmarks" / "peer_metrics" / "sacrebleu"), keep_in_memory=True)
    ours = evaluate.load(str(REPO / "common" / "metrics" / "sacrebleu"), keep_in_memory=True)
    got = peer.compute(predictions=predictions, references=references)
    assert got["score"] == pytest.approx(ours.compute(predictions=predictions, references=references)["bleu"])
    assert 0 < got["score"] < 100
    one = peer.compute(predictions=predictions[:1], references=references[:1])
    # unigrams: 5 of 6 match ("a" vs "the"); bigrams 3 of 5 (the cat, cat sat, sat on); 4-grams 1 of 3
    assert one["counts"] == [5, 3, 2, 1] and one["totals"] == [6, 5, 4, 3]
    assert one["sys_len"] == one["ref_len"] == 6 and one["bp"] == 1.0
    with pytest.raises(ValueError, match="same number of references"):
        peer.compute(predictions=["a", "b"], references=[["a"], ["b", "c"]])


def flag_values(command, start):
    """{flag: value} of the script flags of a launch command (the tokens after the script path)."""
    groups = bench.split_flags(command[start:])
    return {g[0]: g[1] if len(g) == 2 else tuple(g[1:]) for g in groups}


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="needs the shared data (SHARED_DATA_DIR)")
def test_peer_and_ours_get_the_same_data_and_hyper_parameters(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "model_path", lambda: str(tmp_path / "model"))
    specs = bench.peer_tasks(40, tmp_path / "data", which=("glue", "ner"))
    assert list(specs) == ["glue", "ner"] and specs["glue"]["train_samples"] == 40
    assert specs["ner"]["train_samples"] == 40
    assert len((tmp_path / "data" / "glue" / "train.csv").read_text().strip().splitlines()) == 41  # + header
    assert len((tmp_path / "data" / "glue" / "validation.csv").read_text().strip().splitlines()) == 409
    for task, spec in specs.items():
        configs = bench.peer_configs(task, spec)
        assert [c[0] for c in configs] == [f"{task}_{n}" for n in ("peer_fp32", "peer_bf16", "ours_plain",
                                                                    "ours_best")]
        flags = {}
        for name, side, command in configs:
            script = next(i for i, token in enumerate(command) if token.endswith(".py"))
            launcher = command[:script]
            assert launcher[launcher.index("--num_cpu_threads_per_process") + 1] == "2"
            assert launcher[launcher.index("--num_processes") + 1] == "1"
            assert launcher[launcher.index("--mixed_precision") + 1] == ("bf16" if name.endswith("peer_bf16")
                                                                         else "no")
            assert command[script].startswith(str(bench.PEERS) if side == "peer" else str(REPO / "examples"))
            flags[name] = flag_values(command, script + 1)
        shared = ["--train_file", "--validation_file", "--model_name_or_path", "--per_device_train_batch_size",
                  "--per_device_eval_batch_size", "--learning_rate", "--num_train_epochs", "--seed",
                  "--lr_scheduler_type", "--num_warmup_steps", "--weight_decay", "--max_length"]
        for flag in shared:
            values = {name: f.get(flag) for name, f in flags.items()}
            assert len(set(values.values())) == 1 and None not in values.values(), (task, flag, values)
        assert flags[f"{task}_peer_fp32"] == flags[f"{task}_peer_bf16"] == flags[f"{task}_ours_plain"]
        best = flags[f"{task}_ours_best"]
        assert best["--mixed_precision"] == "bf16" and best["--optim"] == "adamw_torch_fused"
        assert {k: v for k, v in best.items() if k in flags[f"{task}_ours_plain"]} == flags[f"{task}_ours_plain"]
    with pytest.raises(ValueError, match="--peer_tasks: unknown"):
        bench.peer_tasks(40, tmp_path / "data", which=("image",))
    # --peer_seeds: both sides of every configuration get the seed asked for, whether built with it or given it
    # afterwards by with_seed (run_peers converts the data once)
    for task, spec in bench.peer_tasks(40, tmp_path / "data", which=("glue", "ner"), seed=43).items():
        reseeded = dict(specs[task], peer_args=bench.with_seed(specs[task]["peer_args"], 43),
                        ours_args=bench.with_seed(specs[task]["ours_args"], 43))
        for built, derived in zip(bench.peer_configs(task, spec), bench.peer_configs(task, reseeded)):
            name, side, command = built
            script = next(i for i, token in enumerate(command) if token.endswith(".py"))
            assert flag_values(command, script + 1)["--seed"] == "43", name
            assert derived == built, name


def test_peers_table_gives_the_ratio_to_the_peers_best_configuration():
    def peer_row(name, wall, metric, repeat=1, failed=False):
        return {"name": f"glue_{name}", "task": "glue", "side": name.split("_")[0], "repeat": repeat, "wall_s": wall,
                "train_samples": 800, "metric": metric, "failed": failed, "other_load": 0.5}

    rows = [peer_row("peer_fp32", 120.0, 0.70), peer_row("peer_fp32", 130.0, 0.70, 2),
            peer_row("peer_bf16", 90.0, 0.703), peer_row("peer_bf16", 94.0, 0.703, 2),
            peer_row("ours_plain", 70.0, 0.71), peer_row("ours_best", 45.0, 0.711),
            peer_row("ours_best", 47.0, 0.711, 2), peer_row("ours_best", 0.0, None, 3, failed=True)]
    table = bench.peers_table(rows)
    fp32 = next(line for line in table.splitlines() if line.startswith("| glue | peer_fp32 "))
    assert [c.strip() for c in fp32.split("|")[3:6]] == ["125.0", "120.0, 130.0", "6.4"]
    summary = table.splitlines()[-1]
    # peer's best = bf16 (median 92 s), ours best median 46 s: 2.00x, accuracy 0.703 -> 0.711
    assert [c.strip() for c in summary.split("|")[1:-1]] == ["glue", "peer_bf16 92.0 s", "46.0 s", "2.00x",
                                                            "0.703 -> 0.711", "yes", "yes"]
    clm = [dict(r, task="clm", name=r["name"].replace("glue", "clm"), metric=m) for r, m in
           zip(rows[:6], (300.0, 300.0, 290.0, 290.0, 250.0, 310.0))]
    assert bench.peers_table(clm).splitlines()[-1].split("|")[6].strip() == "no"  # perplexity: higher is worse
    assert fp32.split("|")[6].strip() == "accuracy 0.700"  # repeats that agree: no range
    # several seeds: each seed's median, then the median over seeds (seed 42 run three times counts once), with
    # the range over seeds; rows without a seed (before --peer_seeds) are seed 42
    seeded = [dict(peer_row("ours_best", 45.0, m, i + 1), seed=seed) for i, (seed, m) in
              enumerate([(42, 0.70), (42, 0.70), (43, 0.74), (44, 0.68), (45, 0.69)])]
    seeded.append(peer_row("ours_best", 45.0, 0.70, 6))
    ours_best = next(line for line in bench.peers_table(seeded).splitlines() if "| ours_best |" in line)
    assert ours_best.split("|")[6].strip() == "accuracy 0.695 (0.680-0.740 over 4 seeds)"
    # one seed whose repeats differ: their range
    noisy = [peer_row("ours_best", 45.0, 0.70), peer_row("ours_best", 45.0, 0.72, 2)]
    ours_best = next(line for line in bench.peers_table(noisy).splitlines() if "| ours_best |" in line)
    assert ours_best.split("|")[6].strip() == "accuracy 0.710 (0.700-0.720 over 2 runs)"


@pytest.mark.slow  # imports the five default peer scripts and five of ours (about 10 s each on the loaded 2 cores)
@pytest.mark.skipif(not SHARED_DATA.is_dir() or not bench.PEERS.is_dir(), reason="needs the shared data and peers")
def test_peer_and_ours_accept_their_command_lines(tmp_path, monkeypatch):
    # Both sides' own parse_args read the section's flags (no training run of either side; translation's
    # preparation does run one 1-step run of ours, which trains the BPE and saves the config both sides start from).
    monkeypatch.setattr(bench, "model_path", lambda: str(tmp_path / "model"))
    specs = bench.peer_tasks(16, tmp_path / "data")
    for task, spec in specs.items():
        for name, side, command in bench.peer_configs(task, spec):
            script = next(i for i, token in enumerate(command) if token.endswith(".py"))
            path, flags = Path(command[script]), command[script + 1:] + ["--output_dir", str(tmp_path / name)]
            monkeypatch.syspath_prepend(str(path.parent))
            module = importlib.import_module(path.stem)
            if side == "peer":  # their parse_args reads sys.argv
                monkeypatch.setattr(sys, "argv", [str(path)] + flags)
                args = module.parse_args()
            else:
                args = module.parse_args(flags)
            assert args.seed == 42 and args.num_train_epochs == 1, name


@pytest.mark.parametrize("flag", ["--seeds", "--peer_seeds"])
@pytest.mark.parametrize("value, expected", [("43,x", "expected comma-separated integers"),
                                             (",", "expected at least one seed"),
                                             ("42,-1", "-1 is outside 0 to 2**32 - 1")])
def test_a_bad_seed_list_is_refused_by_name_before_anything_runs(flag, value, expected, capsys, monkeypatch):
    def must_not_run(*args, **kwargs):
        raise AssertionError("the bench went past its argument checks")

    monkeypatch.setattr(bench, "run_peers", must_not_run)
    monkeypatch.setattr(bench, "measure_peaks", must_not_run)
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--sections", "peers", flag, value])
    assert exit_info.value.code == 2
    assert f"{flag} {value!r}: {expected}" in capsys.readouterr().err


def test_seed_list_keeps_the_order_and_skips_blanks():
    assert bench.seed_list(None, "--peer_seeds", "44, 42,,43") == [44, 42, 43]


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="needs the shared data (SHARED_DATA_DIR)")
def test_seq2seq_best_rows_have_no_length_grouping(tmp_path, monkeypatch):
    # From scratch, --group_by_length cost the model its metric: Multi30k, one epoch, BLEU 11.2 with it, 13.8 without,
    # the peer 13.8 (300 warm-up steps; 1.4, 13.0 and 11.8 with 30); DialogSum, 3 epochs of 4,000 dialogues, ROUGE-1
    # 15.4 / 9.5 with it against 16.8 / 15.9 without (seeds 42 / 43); docs/benchmarks.md. The other switches stay.
    monkeypatch.setattr(bench, "prepared", lambda path, command: Path(path))
    spec = bench.peer_tasks(8, tmp_path / "data", which=("translation",))["translation"]
    assert spec["ours_best"] == bench.SEQ2SEQ_BEST
    assert spec["ours_best"][spec["ours_best"].index("--mixed_precision") + 1] == "bf16"


def test_seq2seq_section_best_rows_have_no_length_grouping():
    # (the section commands only name the shared files: no data needed)
    translation_best = bench.translation_configs(800)[1][6]
    summarization_best = bench.summarization_configs(80)[1][6]
    for best in (bench.SEQ2SEQ_BEST, translation_best, summarization_best):
        assert "--group_by_length" not in best
        assert {"--fast_dropout", "--reuse_cpu_memory", "eager", "bf16", "adamw_torch_fused"} <= set(best)


def test_translation_warm_up_is_the_recipes_300_for_a_whole_epoch_and_two_thirds_of_a_shorter_one():
    # 29,000 Multi30k pairs at batch 64: 454 steps, the recipe's 300 (recipes/multi30k_marian.yaml)
    assert bench.translation_warmup(29000, 64) == 300
    assert bench.translation_warmup(12800, 64) == 133  # 200 steps
    assert bench.translation_warmup(3200, 64) == 33  # 50 steps
    assert bench.translation_warmup(1, 64) == 0


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="needs the shared data (SHARED_DATA_DIR)")
def test_translation_peer_and_ours_get_the_same_warm_up(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "prepared", lambda path, command: Path(path))
    spec = bench.peer_tasks(200, tmp_path / "data", which=("translation",))["translation"]
    for args in (spec["peer_args"], spec["ours_args"]):
        assert args[args.index("--num_warmup_steps") + 1] == str(bench.translation_warmup(800, 64)) == "8"

"""End-to-end tests of examples/run_qa_beam_search.py (XLNet's beam-search question-answering head).

The data is test_run_qa.py's learnable SQuAD-like set ("... anna moved to new york ..." / "where did anna move to
?"); the model a 2-layer XLNet from a config with a SentencePiece-style Unigram tokenizer trained here (the
`tokenizers` Unigram trainer) on the questions and contexts plus the lines of the standard library's argparse.py
(on the QA text alone the trainer keeps little more than characters). Contexts of 25-65 words are about 40-100
tokens: with --max_seq_length 64 many questions are split into 2-3 features.
"""

import argparse
import json

import pytest
import run_qa_beam_search
import torch
from test_run_qa import flatten, make_squad, write_json, write_jsonl

from conftest import launch, read_results

FEATURES = ["--max_seq_length", "64", "--doc_stride", "24"]
TRAIN = ["--learning_rate", "3e-3", "--per_device_train_batch_size", "16", "--per_device_eval_batch_size", "8",
         "--seed", "1", "--num_warmup_steps", "10", *FEATURES]
XLNET_SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>", "<eop>", "<eod>"]


def train_unigram_xlnet_tokenizer(texts, path, vocab_size=400):
    """An XLNet fast tokenizer (SentencePiece Unigram pieces, "▁" for spaces, `<sep>`/`<cls>` at the end, padding on
    the left) whose pieces and scores (rounded to 0.01) the `tokenizers` Unigram trainer learned on `texts`; saved
    to `path`."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import XLNetTokenizerFast

    tokenizer = Tokenizer(models.Unigram())
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.train_from_iterator(texts, trainers.UnigramTrainer(vocab_size=vocab_size, unk_token="<unk>",
                                                                 special_tokens=XLNET_SPECIAL_TOKENS))
    # The trainer's pieces are the same from run to run, their scores not to the last bits (summation order):
    # rounded and sorted, the vocabulary (ids included) is the same in every session.
    pieces = json.loads(tokenizer.to_str())["model"]["vocab"]
    special = [(piece, 0.0) for piece in XLNET_SPECIAL_TOKENS]
    learned = [(piece, round(score, 2)) for piece, score in pieces if piece not in XLNET_SPECIAL_TOKENS]
    vocab = special + sorted(learned, key=lambda item: (-item[1], item[0]))
    fast = XLNetTokenizerFast(vocab=vocab, unk_id=0, model_max_length=512)
    fast.save_pretrained(path)
    return fast


def build_tiny_xlnet(path, texts, **config_overrides):
    """A 2-layer, 64-wide `XLNetForQuestionAnswering` (random weights drawn under seed 0; 4 start x 4 end
    candidates) and its Unigram tokenizer (`train_unigram_xlnet_tokenizer` on `texts` and argparse.py's lines),
    saved to `path`."""
    from transformers import XLNetConfig, XLNetForQuestionAnswering

    extra = open(argparse.__file__, encoding="utf-8").read().lower().splitlines()
    tokenizer = train_unigram_xlnet_tokenizer(list(texts) + extra, path)
    config = XLNetConfig(vocab_size=len(tokenizer), d_model=64, n_layer=2, n_head=2, d_inner=128, start_n_top=4,
                         end_n_top=4, **config_overrides)
    torch.manual_seed(0)
    XLNetForQuestionAnswering(config).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def beam_data(tmp_path_factory):
    """v1: train in SQuAD JSON (300 questions), validation in JSON Lines (45 questions); v2: the same layouts with
    a third of the questions unanswerable."""
    directory = tmp_path_factory.mktemp("qa_beam_data")
    paths = {}
    for version, fraction in (("v1", 0.0), ("v2", 0.35)):
        train, validation = make_squad(100, 1, fraction), make_squad(15, 2, fraction, prefix="v")
        paths[version] = {
            "train": write_json(directory / f"train_{version}.json", train),
            "validation": write_jsonl(directory / f"validation_{version}.jsonl", flatten(validation)),
            "validation_rows": flatten(validation),
        }
    return paths


@pytest.fixture(scope="module")
def tiny_xlnet(tmp_path_factory, beam_data):
    texts = [row["question"] + " " + row["context"] for row in flatten(make_squad(100, 1, 0.35))]
    return build_tiny_xlnet(tmp_path_factory.mktemp("tiny_xlnet"), texts)


def data_args(paths):
    return ["--train_file", paths["train"], "--validation_file", paths["validation"]]


def run_main(main, argv):
    """`main(argv)` in this process (no launcher start-up); the next run builds its Accelerator afresh."""
    from accelerate.state import AcceleratorState

    try:
        return main([str(a) for a in argv])
    finally:
        AcceleratorState._reset_state()


def test_features_carry_what_the_beam_search_head_takes(tiny_xlnet, beam_data):
    """XLNet pads on the left: (context, question) pairs, `<cls>` last. p_mask opens exactly the context tokens
    and `<cls>`; a feature holding the answer is labelled with its tokens (is_impossible 0), any other with
    `<cls>` (is_impossible 1)."""
    from transformers import AutoTokenizer

    from common.tasks.squad import prepare_train_features, prepare_validation_features

    tokenizer = AutoTokenizer.from_pretrained(tiny_xlnet)
    assert tokenizer.padding_side == "left"
    rows = flatten(make_squad(10, 5, 0.35))
    batch = {key: [row[key] for row in rows] for key in rows[0]}
    train = prepare_train_features(batch, tokenizer, 64, 24, p_mask=True)
    evaluation = prepare_validation_features(batch, tokenizer, 64, 24, p_mask=True)
    assert train["p_mask"] == evaluation["p_mask"] and train["cls_index"] == evaluation["cls_index"]
    # XLNet's segments: the context 0, the question 1, <cls> 2 (the tokenizer leaves them out unless asked).
    assert train["token_type_ids"] == evaluation["token_type_ids"]
    assert all(types[-1] == 2 and set(types) == {0, 1, 2} for types in train["token_type_ids"])
    labelled = 0
    for i, ids in enumerate(train["input_ids"]):
        cls_index = train["cls_index"][i]
        assert cls_index == len(ids) - 1 and ids[cls_index] == tokenizer.cls_token_id
        context = [k for k, offset in enumerate(evaluation["offset_mapping"][i]) if offset is not None]
        assert [k for k, m in enumerate(train["p_mask"][i]) if m == 0.0] == context + [cls_index]
        start, end = train["start_positions"][i], train["end_positions"][i]
        assert train["is_impossible"][i] == float(start == end == cls_index)
        if start != cls_index:
            labelled += 1
            row = next(r for r in rows if r["id"] == evaluation["example_id"][i])
            offsets = evaluation["offset_mapping"][i]
            assert row["context"][offsets[start][0]:offsets[end][1]].strip() == row["answers"]["text"][0]
    assert 0 < labelled < len(train["input_ids"])


@pytest.fixture(scope="module")
def v2_run(tmp_path_factory, tiny_xlnet, beam_data):
    out = tmp_path_factory.mktemp("qa_beam_v2") / "out"
    run = launch("run_qa_beam_search.py", ["--model_name_or_path", tiny_xlnet, *data_args(beam_data["v2"]),
                                           "--version_2_with_negative", "--num_train_epochs", "3", "--output_dir",
                                           out, *TRAIN])
    (out.parent / "launch.log").write_text(run.stdout)  # the banner, for the test below
    return out


def test_the_banner_counts_questions_and_their_features(v2_run):
    """The banner's "Num examples" used to be the features (the DataLoader's rows), not the questions: 300 training
    questions, cut into more features at --max_seq_length 64 (train_samples counts features, 3 epochs)."""
    results = read_results(v2_run)
    features = results["train_samples"] // 3
    assert features > 300
    assert f"Num examples = 300 questions ({features:,} features)" in (v2_run.parent / "launch.log").read_text()


def test_v2_learns_spans_and_predicts_no_answer_through_cls_logits(v2_run, beam_data):
    """The one launch of make test: SQuAD v2.0 on 1 process. Answerable questions are answered (an untrained model
    picks a random span: about 2 %), unanswerable ones get "" exactly where the question's minimum cls_logits is
    above --null_score_diff_threshold 0, and the files hold what they say."""
    from transformers import XLNetForQuestionAnswering

    results = read_results(v2_run)
    rows = beam_data["v2"]["validation_rows"]
    ids = [row["id"] for row in rows]
    unanswerable = [row["id"] for row in rows if not row["answers"]["text"]]
    assert results["eval_total"] == results["eval_samples"] == len(rows) == 45
    assert results["eval_NoAns_total"] == len(unanswerable) > 5
    # Measured (3 epochs): HasAns 75, NoAns 62 at threshold 0 (5 of 13 unanswerable questions at -1.6), best
    # exact 82 at the best threshold (-5.1); an always-"no answer" model scores exact = 29 (the baseline).
    assert results["eval_HasAns_exact"] >= 60 and results["eval_HasAns_f1"] >= results["eval_HasAns_exact"]
    assert results["eval_NoAns_exact"] >= 55
    assert results["eval_exact"] >= results["eval_baseline_exact"] + 30 and results["eval_best_exact"] >= 75
    predictions = json.loads((v2_run / "predictions.json").read_text())
    null_odds = json.loads((v2_run / "null_odds.json").read_text())
    nbest = json.loads((v2_run / "nbest_predictions.json").read_text())
    assert list(predictions) == list(null_odds) == list(nbest) == ids
    for qid in ids:  # the threshold decides, through the minimum cls_logits
        assert (predictions[qid] == "") == (null_odds[qid] > 0.0)
    # cls_logits tells the questions apart: an unanswerable question's null score is above an answerable one's for
    # nearly every pair (measured 0.96; untrained: about 0.5).
    answerable = [qid for qid in ids if qid not in unanswerable]
    pairs = [(u, a) for u in unanswerable for a in answerable]
    assert sum(null_odds[u] > null_odds[a] for u, a in pairs) >= 0.9 * len(pairs)
    for row in rows:
        candidates = nbest[row["id"]]
        assert candidates and sum(c["probability"] for c in candidates) == pytest.approx(1.0, abs=1e-4)
        assert all(row["context"][c["offsets"][0]:c["offsets"][1]] == c["text"] for c in candidates)
        if predictions[row["id"]]:
            assert predictions[row["id"]] == candidates[0]["text"]
    model = XLNetForQuestionAnswering.from_pretrained(v2_run)
    assert model.config.start_n_top == 4 and model.config.end_n_top == 4


def test_v1_question_without_answer_refused_before_training(tmp_path, tiny_xlnet, beam_data):
    """SQuAD v1.1 has an answer span in every context: a question with none (as in v2.0) is named, by id and row,
    before the first step."""
    squad = make_squad(4, 1)
    qa = squad["data"][1]["paragraphs"][0]["qas"][0]  # the 4th question of the file
    qa["answers"] = []
    train = write_json(tmp_path / "train.json", squad)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=rf"--train_file .*train\.json: 1 question\(s\) have no answer \(e\.g\. id "
                                         rf"\['{qa['id']}'\]\).*--version_2_with_negative.*row\(s\).*: \[4\]"):
        run_main(run_qa_beam_search.main, ["--model_name_or_path", tiny_xlnet, "--train_file", train,
                                           "--validation_file", beam_data["v1"]["validation"], "--output_dir", out,
                                           *TRAIN])
    assert not (out / "model.safetensors").exists() and not list(out.glob("step_*"))


def test_a_model_other_than_xlnet_is_refused(tmp_path, beam_data):
    config = tmp_path / "bert"
    config.mkdir()
    (config / "config.json").write_text(json.dumps({"model_type": "bert", "vocab_size": 50}))
    with pytest.raises(ValueError, match=r"a 'bert' model; the beam-search head .* needs an XLNet"):
        run_main(run_qa_beam_search.main, ["--model_name_or_path", config, *data_args(beam_data["v1"]),
                                           "--output_dir", tmp_path / "out"])


@pytest.mark.slow  # a 2-process launch; evaluation parity and exact resume: test_eval_parity.py, test_resume_all.py
def test_v1_two_processes_learn_and_predict_the_test_file(tmp_path, tiny_xlnet, beam_data):
    """SQuAD v1.1 on 2 processes with --do_predict (the validation questions again, as the test file): the spans
    are learnt, and the test file scores exactly as the validation file."""
    paths = beam_data["v1"]
    out = tmp_path / "out"
    launch("run_qa_beam_search.py", ["--model_name_or_path", tiny_xlnet, *data_args(paths), "--test_file",
                                     paths["validation"], "--num_train_epochs", "3", "--per_device_eval_batch_size",
                                     "3", "--output_dir", out, *TRAIN], num_processes=2)
    results = read_results(out)
    assert results["eval_samples"] == results["predict_samples"] == 45
    assert results["eval_exact_match"] >= 60 and results["eval_f1"] >= results["eval_exact_match"]
    assert results["predict_exact_match"] == results["eval_exact_match"]
    assert results["predict_f1"] == results["eval_f1"]
    assert (out / "predictions.json").read_text() == (out / "predict_predictions.json").read_text()
    assert not (out / "null_odds.json").exists()

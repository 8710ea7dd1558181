"""Evaluation only (`--max_train_steps 0`) of a saved tiny model gives identical metrics on 1 and 2 processes,
for every script (run_glue has its own in test_run_glue.py).

The validation sets are sized so that 2 processes x the eval batch size does not divide them: the last round
of batches is padded with repeated examples, which `gather_for_metrics` must drop. Each test checks the number
of examples scored, every `eval_*` entry of all_results.json but timings (exact equality), and where the script writes
predictions, that they are the same text in the same order.

The saved model is the one of the uninterrupted run of test_resume_all.py for that script
(`test_resume_all.uninterrupted_run`: trained once per test session, on whichever pytest-xdist worker asks first).
All slow (`make test-all`): each is 2 launches of about 20 s; `make test` keeps run_glue's evaluation-only parity
(test_run_glue.py).
"""

import json
import math

import pytest
from test_resume_all import SETUPS, TIMING, uninterrupted_run

from conftest import launch, read_results

CHEAP = ()  # all in make test-all; make test keeps run_glue's parity test


def ner_eval(files, model, out):
    return ["--model_name_or_path", model, "--train_file", files["train"], "--validation_file", files["validation"],
            "--per_device_eval_batch_size", 8], 37


def clm_eval(files, model, out):
    return ["--model_name_or_path", model, "--train_file", files["train"], "--validation_file", files["validation"],
            "--block_size", 32, "--per_device_eval_batch_size", 8], None


def qa_eval(files, model, out):
    return ["--model_name_or_path", model, "--train_file", files["train"], "--validation_file", files["validation"],
            "--max_eval_samples", 37, "--per_device_eval_batch_size", 3, "--max_seq_length", 64,
            "--doc_stride", 24], 37


def qa_beam_search_eval(files, model, out):
    return qa_eval(files, model, out)


def translation_eval(files, model, out):
    return ["--model_name_or_path", model, "--train_file", files["train"], "--validation_file", files["validation"],
            "--source_lang", "en", "--target_lang", "de", "--max_source_length", 32, "--val_max_target_length", 24,
            "--per_device_eval_batch_size", 8], 37


def summarization_eval(files, model, out):
    return ["--model_name_or_path", model, "--train_file", files["train"], "--validation_file", files["validation"],
            "--max_source_length", 48, "--val_max_target_length", 16, "--per_device_eval_batch_size", 8], 37


def image_classification_eval(files, model, out):
    return ["--model_name_or_path", model, "--train_dir", files["train"], "--validation_dir", files["validation"],
            "--per_device_eval_batch_size", 4], 21


def audio_classification_eval(files, model, out):
    return ["--model_name_or_path", model, "--train_dir", files["train"], "--validation_dir", files["validation"],
            "--per_device_eval_batch_size", 4], 21


def wav2vec2_pretraining_eval(files, model, out):
    # The checkpoint's config keeps the fine-tuning masks (mask_time_prob 0.05); the pretraining masks are flags.
    return ["--model_name_or_path", model, "--validation_dir", files["validation"], "--mask_time_prob", "0.5",
            "--mask_time_length", "2", "--per_device_eval_batch_size", 4], 15


def mim_eval(files, model, out):
    # 18 validation images, 4 per batch and process: the last round (2 processes) holds 2 images in 8 slots; the
    # evaluation masks are seeded per image (--eval_mask_seed). The checkpoint keeps its sizes; the mask flags do
    # not travel with it.
    return ["--model_name_or_path", model, "--validation_dir", files["validation"], "--mask_patch_size", "8",
            "--mask_ratio", "0.6", "--per_device_eval_batch_size", 4], 18


def multiple_choice_eval(files, model, out):
    return ["--model_name_or_path", model, "--train_file", files["train"], "--validation_file", files["validation"],
            "--max_seq_length", 32, "--per_device_eval_batch_size", 8], 37


def mlm_eval(files, model, out):
    # 33 validation blocks of 32 tokens; the evaluation masks are seeded per block (--eval_mask_seed).
    return ["--model_name_or_path", model, "--train_file", files["train"], "--validation_file", files["validation"],
            "--max_seq_length", 32, "--per_device_eval_batch_size", 8], None


def fim_eval(files, model, out):
    # The saved tokenizer has the FIM tokens (nothing added); validation blocks of 32 tokens, 8 per batch, each
    # rearranged from its own seed (--eval_fim_seed); 13 files infilled, shared among the processes.
    return ["--model_name_or_path", model, "--train_file", files["train"], "--validation_file", files["validation"],
            "--block_size", 32, "--per_device_eval_batch_size", 8, "--infill_eval_samples", 13,
            "--infill_max_new_tokens", 6], None


def semantic_segmentation_eval(files, model, out):
    # The classes come from the validation masks (0, 1, 2), as the trained model named them; 21 masks of sizes
    # 24-48 px, each scored at its own size.
    return ["--model_name_or_path", model, "--validation_dir", files["validation"],
            "--per_device_eval_batch_size", 4], 21


def object_detection_eval(files, model, out):
    # 30 validation images, 4 per batch and process: the last round (2 processes) holds 6 images in 8 slots.
    return ["--model_name_or_path", model, "--train_file", files["train"], "--validation_file", files["validation"],
            "--per_device_eval_batch_size", 4], 30


def instance_segmentation_eval(files, model, out):
    # 18 validation images, 4 per batch and process: the last round (2 processes) holds 2 images in 8 slots.
    return ["--model_name_or_path", model, "--train_file", files["train"], "--validation_file", files["validation"],
            "--per_device_eval_batch_size", 4], 18


EVAL_ARGS = {"ner": ner_eval, "clm": clm_eval, "qa": qa_eval, "qa_beam_search": qa_beam_search_eval,
             "translation": translation_eval,
             "summarization": summarization_eval, "image_classification": image_classification_eval,
             "multiple_choice": multiple_choice_eval, "mlm": mlm_eval,
             "semantic_segmentation": semantic_segmentation_eval,
             "object_detection": object_detection_eval, "instance_segmentation": instance_segmentation_eval,
             "audio_classification": audio_classification_eval,
             "wav2vec2_pretraining": wav2vec2_pretraining_eval, "mim": mim_eval, "fim": fim_eval}
# Files of predictions that must be identical (same lines, same order) on 1 and 2 processes.
PREDICTION_FILES = {"qa": "predictions.json", "qa_beam_search": "predictions.json",
                    "translation": "generated_predictions.txt", "summarization": "generated_predictions.txt",
                    "object_detection": "predictions.json", "instance_segmentation": "predictions.json",
                    "fim": "infill_predictions.jsonl"}


# Prediction files holding model outputs as floats (scores, and object detection's boxes). On 2 processes the last
# round of batches holds other examples (and padding) than on 1, and the CPU's matrix kernels pick their blocking by
# shape, so a float32 output can differ in its last bits (so every float is compared to rounding, boxes too): seen
# 2026-12-06 on an AMX Xeon, instance segmentation's mask scores of the last images, e.g. 0.213180273771286 against
# 0.21318024396896362 (1.4e-7 relative), with every eval_* metric still identical.
FLOAT_SCORE_FILES = {"object_detection", "instance_segmentation"}


def assert_same_up_to_rounding(a, b, rel=1e-6, where="predictions"):
    """Asserts that two parsed JSON values are equal, floats within `rel` relative difference (float32 rounding
    is about 6e-8), everything else (keys, strings, ints, list lengths and order) exactly."""
    if isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, rel=rel, abs=1e-12), (where, a, b)
    elif isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), (where, sorted(a), sorted(b))
        for key in a:
            assert_same_up_to_rounding(a[key], b[key], rel, f"{where}[{key!r}]")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), (where, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_up_to_rounding(x, y, rel, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


def test_same_up_to_rounding_tolerates_only_float_rounding():
    one = [{"image_id": 116, "counts": "`b02[15N1", "score": 0.213180273771286}]
    assert_same_up_to_rounding(one, [{"image_id": 116, "counts": "`b02[15N1", "score": 0.21318024396896362}])
    for other in ([{"image_id": 116, "counts": "`b02[15N1", "score": 0.2132}],  # a real score change
                  [{"image_id": 117, "counts": "`b02[15N1", "score": 0.213180273771286}],
                  [{"image_id": 116, "counts": "`b02[15N2", "score": 0.213180273771286}],
                  one + one, []):
        with pytest.raises(AssertionError):
            assert_same_up_to_rounding(one, other)


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in CHEAP else pytest.mark.slow) for n in SETUPS])
def test_evaluation_only_identical_on_1_and_2_processes(name, tmp_path, tmp_path_factory):
    script, _, _, files, trained = uninterrupted_run(name, tmp_path_factory)  # the saved tiny model
    trained_results = read_results(trained)
    assert trained_results["train_steps"] > 0
    outputs = []
    for processes in (1, 2):
        out = tmp_path / f"eval_{processes}"
        args, expected_samples = EVAL_ARGS[name](files, trained, out)
        launch(script, [*args, "--max_train_steps", 0, "--seed", 0, "--output_dir", out], num_processes=processes)
        assert not (out / "model.safetensors").exists()  # evaluation only: nothing but results is saved
        outputs.append(out)
    one, two = read_results(outputs[0]), read_results(outputs[1])
    for results in (one, two):  # nothing trained: no train_* key; the saved model loads whole, head included
        assert not [key for key in results if key.startswith("train_")], results
        assert results["head_newly_initialized"] is False, results.get("newly_initialized_weights")
    if expected_samples is None:  # language modelling: the number of blocks of the validation text
        expected_samples = trained_results["eval_samples"]
    batch = int(args[args.index("--per_device_eval_batch_size") + 1])
    assert expected_samples % (2 * batch) != 0, "the last round of batches must be padded on 2 processes"
    assert one["eval_samples"] == two["eval_samples"] == expected_samples
    # every eval_* entry but the timings (eval_samples_per_second, ... of the generating scripts)
    eval_keys = sorted(k for k in one if k.startswith("eval_") and not TIMING.search(k))
    assert eval_keys == sorted(k for k in two if k.startswith("eval_") and not TIMING.search(k))
    for key in eval_keys:
        assert one[key] == two[key], (key, one[key], two[key])
    if name == "clm":
        assert one["eval_tokens"] == expected_samples * 31 and math.isfinite(one["eval_loss"])
    if name in PREDICTION_FILES:
        a, b = ((o / PREDICTION_FILES[name]).read_text(encoding="utf-8") for o in outputs)
        if name in FLOAT_SCORE_FILES:  # same predictions, order, ids and masks; floats to float32 rounding
            assert_same_up_to_rounding(json.loads(a), json.loads(b))
        else:
            assert a == b
        if name in ("qa", "qa_beam_search"):
            assert len(json.loads(a)) == 37
        elif name == "object_detection":
            assert {d["image_id"] for d in json.loads(a)} == set(range(100, 130))
        elif name == "fim":
            assert len(a.splitlines()) == one["eval_infill_samples"] == 13
        elif name == "instance_segmentation":
            assert {d["image_id"] for d in json.loads(a)} <= set(range(100, 118)) and json.loads(a)
        else:
            assert len(a.splitlines()) == 37
    print(f"{name}: {expected_samples} examples, eval batch {batch}/process; 1 and 2 processes: "
          f"{ {k: one[k] for k in eval_keys} }")

"""run_glue under DeepSpeed ZeRO stage 2 (configs/deepspeed_zero2.yaml) and stage 3 (configs/deepspeed_zero3.yaml:
parameters sharded, the final save gathers them), one CPU process.

Launched as a user would: `accelerate launch --config_file configs/deepspeed_zero2.yaml --num_processes 1
--mixed_precision no examples/run_glue.py ...` (the flags override the config's 8 GPUs and bf16). The run must
really go through DeepSpeed (the log names DistributedType.DEEPSPEED), learn (accuracy far above the ~0.5 of
an untrained model on this balanced set, training loss below ln 2), and save a model that `from_pretrained`
loads and that scores what the script reported.

Skipped, with the reason, when `import deepspeed` fails (requirements.txt installs it). On the first run on a
machine DeepSpeed compiles a small C++ op (shm comm) into ~/.cache/torch_extensions: about 30 s more.
"""

import csv
import math
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from conftest import EXAMPLES, OFFLINE_ENV, REPO, _free_port, read_results

CONFIG = REPO / "configs" / "deepspeed_zero2.yaml"
ZERO3_CONFIG = REPO / "configs" / "deepspeed_zero3.yaml"


@pytest.fixture(scope="module")
def deepspeed_available():
    try:
        import deepspeed  # noqa: F401
    except Exception as error:  # ImportError, or a broken install failing while it detects the accelerator
        pytest.skip(f"DeepSpeed not usable here (`pip install deepspeed`): {type(error).__name__}: {error}")


def launch_deepspeed(args, config=CONFIG):
    """`accelerate launch --config_file <config> (default configs/deepspeed_zero2.yaml)` on one CPU process,
    offline."""
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config),
               "--num_processes", "1", "--mixed_precision", "no", "--main_process_port", str(_free_port()),
               str(EXAMPLES / "run_glue.py"), *map(str, args)]
    env = {**os.environ, **OFFLINE_ENV, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONUNBUFFERED": "1"}
    result = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=600)
    assert result.returncode == 0, f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout[-6000:]}"
    assert "Distributed environment: DEEPSPEED" in result.stdout, result.stdout[-3000:]  # common.launch
    return result


def glue_args(tiny_bert, data, out, *extra):
    return ["--model_name_or_path", tiny_bert, "--train_file", data["train"], "--validation_file", data["validation"],
            "--num_train_epochs", "3", "--learning_rate", "2e-3", "--per_device_train_batch_size", "8", "--seed", "3",
            "--output_dir", out, *extra]


def saved_model_accuracy(model_dir, validation_csv):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    with open(validation_csv) as f:
        rows = list(csv.DictReader(f))
    batch = tokenizer([r["sentence1"] for r in rows], [r["sentence2"] for r in rows], padding=True,
                      return_tensors="pt")
    with torch.no_grad():
        predictions = model(**batch).logits.argmax(-1)
    labels = torch.tensor([int(r["label"]) for r in rows])
    return (predictions == labels).float().mean().item()


@pytest.fixture(scope="module")
def zero2_run(deepspeed_available, tmp_path_factory, tiny_bert, classification_data):
    out = tmp_path_factory.mktemp("zero2") / "out"
    result = launch_deepspeed(glue_args(tiny_bert, classification_data, out, "--checkpointing_steps", "30"))
    return out, result.stdout


def test_zero2_trains_and_saves_a_loadable_model(zero2_run, classification_data):
    out, log = zero2_run
    assert "Distributed environment: DEEPSPEED (ZeRO stage 2)" in log  # the config's ZeRO stage reached DeepSpeed
    results = read_results(out)
    assert results["train_steps"] == 90  # 240 examples / 8 per step x 3 epochs
    assert results["eval_accuracy"] >= 0.9  # untrained: about 0.5 on this balanced set
    assert results["train_loss"] < math.log(2)  # below the loss of a uniform 2-class guess
    assert saved_model_accuracy(out, classification_data["validation"]) == pytest.approx(results["eval_accuracy"])


@pytest.mark.slow
def test_zero2_checkpoint_resumes_to_the_same_weights(zero2_run, tmp_path, tiny_bert, classification_data):
    """step_30 (a DeepSpeed checkpoint written by accelerator.save_state) resumes to the uninterrupted weights."""
    import shutil

    out, _ = zero2_run
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(out / "step_30", resumed / "step_30")
    result = launch_deepspeed(glue_args(tiny_bert, classification_data, resumed, "--resume_from_checkpoint",
                                        "latest"))
    assert "Resuming from" in result.stdout
    expected, actual = load_file(out / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert expected.keys() == actual.keys()
    for key in expected:
        assert torch.equal(expected[key], actual[key]), key
    assert read_results(resumed)["eval_accuracy"] == read_results(out)["eval_accuracy"]


# ----- ZeRO-3 (configs/deepspeed_zero3.yaml: zero3_init_flag, zero3_save_16bit_model) -----
@pytest.fixture(scope="module")
def zero3_run(deepspeed_available, tmp_path_factory, tiny_bert, classification_data):
    out = tmp_path_factory.mktemp("zero3") / "out"
    result = launch_deepspeed(glue_args(tiny_bert, classification_data, out, "--checkpointing_steps", "30"),
                              ZERO3_CONFIG)
    return out, result.stdout


@pytest.mark.slow  # a ZeRO-3 launch (about 2 minutes; the first on a machine also builds a DeepSpeed op)
def test_zero3_trains_and_saves_the_full_model(zero3_run, tiny_bert, classification_data):
    """Under ZeRO-3 the module's own parameters are empty placeholders (shape [0]); the final save must gather
    them: every saved tensor has the shape of the untrained model's, differs from it (trained), and the loaded
    model scores what the script reported."""
    out, log = zero3_run
    assert "Distributed environment: DEEPSPEED (ZeRO stage 3)" in log
    results = read_results(out)
    assert results["train_steps"] == 90
    assert results["eval_accuracy"] >= 0.9 and results["train_loss"] < math.log(2)
    from transformers import AutoModelForSequenceClassification

    # Measured: ZeRO-3's consolidated dict names LayerNorm parameters gamma/beta; from_pretrained maps them back.
    saved = AutoModelForSequenceClassification.from_pretrained(out).state_dict()
    start = AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2).state_dict()
    assert saved.keys() == start.keys()
    for key, tensor in start.items():
        assert saved[key].shape == tensor.shape and saved[key].numel() > 0, key
    assert not torch.equal(saved["bert.embeddings.word_embeddings.weight"],
                           start["bert.embeddings.word_embeddings.weight"])
    assert saved_model_accuracy(out, classification_data["validation"]) == pytest.approx(results["eval_accuracy"])


@pytest.mark.slow  # a second ZeRO-3 launch (about 2 minutes)
def test_zero3_checkpoint_resumes_to_the_same_weights(zero3_run, tmp_path, tiny_bert, classification_data):
    import shutil

    out, _ = zero3_run
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(out / "step_30", resumed / "step_30")
    result = launch_deepspeed(glue_args(tiny_bert, classification_data, resumed, "--resume_from_checkpoint",
                                        "latest"), ZERO3_CONFIG)
    assert "Resuming from" in result.stdout
    expected, actual = load_file(out / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert expected.keys() == actual.keys()
    for key in expected:
        assert torch.equal(expected[key], actual[key]), key


@pytest.mark.slow  # one more ZeRO-2 launch (about a minute); make test keeps the plain ZeRO-2 run and LoRA's DDP run
def test_zero2_with_lora_adapters_trains_and_saves_the_adapter(deepspeed_available, tmp_path, tiny_bert,
                                                               classification_data):
    """--use_peft under DeepSpeed ZeRO-2: the adapter and the classifier train (accuracy well above the ~0.5 of
    an untrained model), the final save writes the adapter, and the merged folder scores what the run reported."""
    out = tmp_path / "zero2_lora"
    launch_deepspeed(glue_args(tiny_bert, classification_data, out, "--use_peft", "--lora_r", "4",
                               "--learning_rate", "1e-2", "--num_train_epochs", "4", "--merge_adapter_on_save"))
    results = read_results(out)
    assert results["eval_accuracy"] >= 0.7
    assert (out / "adapter_model.safetensors").is_file() and (out / "merged" / "model.safetensors").is_file()
    assert results["trainable_parameters"] == 1024 + 66
    assert saved_model_accuracy(out / "merged", classification_data["validation"]) == pytest.approx(
        results["eval_accuracy"])

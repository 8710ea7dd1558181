"""common/launch.py: a script's --mixed_precision that overrides a different one from `accelerate launch` is
reported (found by a new-user trial: `accelerate launch --mixed_precision fp16 ... --config <bf16 recipe>` ran in
bf16 without a word)."""

import os
import subprocess
import sys
from pathlib import Path

from common.launch import launcher_precision_override

REPO = Path(__file__).resolve().parents[2]


def test_a_different_launcher_precision_is_reported_and_the_default_is_not():
    message = launcher_precision_override("bf16", {"ACCELERATE_MIXED_PRECISION": "fp16"})
    assert message.startswith("--mixed_precision bf16 (this script's flag or --config recipe) overrides the "
                              "launcher's mixed precision fp16")
    assert "the run uses bf16" in message
    assert launcher_precision_override("bf16", {"ACCELERATE_MIXED_PRECISION": "no"}) is None  # launcher default
    assert launcher_precision_override("bf16", {"ACCELERATE_MIXED_PRECISION": "bf16"}) is None  # the same
    assert launcher_precision_override(None, {"ACCELERATE_MIXED_PRECISION": "fp16"}) is None  # launcher decides
    assert launcher_precision_override("no", {"ACCELERATE_MIXED_PRECISION": "bf16"}).startswith(
        "--mixed_precision no")
    assert launcher_precision_override("bf16", {}) is None


def test_setup_run_logs_it_and_the_run_uses_the_scripts_value():
    # A fresh process: Accelerator reads the environment once per process.
    code = (
        "import logging, argparse\n"
        "from accelerate.logging import get_logger\n"
        "from common.launch import build_accelerator, setup_run\n"
        "args = argparse.Namespace(gradient_accumulation_steps=1, report_to='all', with_tracking=False,\n"
        "    output_dir='out', mixed_precision='no', seed=None, reuse_cpu_memory=False)\n"
        "accelerator = build_accelerator(args)\n"
        "setup_run(accelerator, args, get_logger('t'))\n"
        "print('USED', accelerator.mixed_precision)\n")
    env = {**os.environ, "ACCELERATE_MIXED_PRECISION": "bf16", "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1",
           "ACCELERATE_USE_CPU": "1"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                            cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "USED no" in result.stdout
    assert "--mixed_precision no (this script's flag or --config recipe) overrides the launcher's mixed precision " \
           "bf16" in result.stdout + result.stderr


def test_uses_layerdrop_reads_every_layerdrop_attribute():
    """LayerDrop models need DDP's find_unused_parameters (common.launch.uses_layerdrop; the 2-process wav2vec2 run of
    test_run_audio_classification failed without it): wav2vec2's default 0.1, Whisper's encoder_layerdrop, BART's
    decoder_layerdrop; 0 and configs without the attribute are not."""
    from transformers import BartConfig, BertConfig, Wav2Vec2Config, WhisperConfig

    from common.launch import uses_layerdrop

    assert uses_layerdrop(Wav2Vec2Config())  # layerdrop 0.1
    assert not uses_layerdrop(Wav2Vec2Config(layerdrop=0.0))
    assert uses_layerdrop(WhisperConfig(encoder_layerdrop=0.2)) and not uses_layerdrop(WhisperConfig())
    assert uses_layerdrop(BartConfig(decoder_layerdrop=0.1)) and not uses_layerdrop(BartConfig())
    assert not uses_layerdrop(BertConfig())

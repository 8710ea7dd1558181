"""Tests of examples/run_wav2vec2_pretraining.py: launched as a user would (offline), in-process for the bad
inputs, plus a gradient check launched on 1 and 2 processes.

The data. `write_melody_clips`: clips of 0.25-0.6 s, 8 kHz (the script resamples to 16 kHz), made of 40-100 ms
tone segments drawn from five pitches, with noise; WAV and FLAC, some stereo. A masked frame's quantized target is
then predictable from its neighbours (its segment continues across the span) and differs from most distractors
(other segments of the clip), so a tiny model learns the contrastive task in seconds. `conftest.write_tone_clips`
(one stationary tone per clip) is used for the input checks: every frame of a stationary tone looks like every
other, so its contrastive task is nearly unlearnable (measured: 2.40 -> 2.02 nats in 96 steps, against 2.37 ->
1.43 in 48 steps on melodies).

The model: a 36k-parameter wav2vec2 from a config (hidden 32, 2 layers, a 3-layer convolutional encoder with an
80-sample hop, 2 x 32 codewords, 10 distractors), LayerDrop and dropout at their defaults (0.1).
"""

import json
import math
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import run_wav2vec2_pretraining as script
import torch
from bad_input_checks import assert_rejected, make_finished_run, write
from safetensors.torch import load_file

from conftest import EXAMPLES, OFFLINE_ENV, REPO, _free_port, launch, read_results, write_tone_clips

SCRIPT = "run_wav2vec2_pretraining.py"
TINY_OVERRIDES = (
    "hidden_size=32,num_hidden_layers=2,num_attention_heads=2,intermediate_size=64,conv_dim=[32,32,32],"
    "conv_kernel=[10,4,4],conv_stride=[5,4,4],num_conv_pos_embeddings=16,num_conv_pos_embedding_groups=4,"
    "codevector_dim=32,proj_codevector_dim=32,num_codevectors_per_group=32,num_negatives=10,"
    "feat_extract_norm=layer,do_stable_layer_norm=true"
)
TINY = ["--model_type", "wav2vec2", "--config_overrides", TINY_OVERRIDES]
NUM_NEGATIVES, CODEBOOK = 10, (2, 32)
COMMON = ["--mask_time_prob", "0.5", "--mask_time_length", "2", "--per_device_train_batch_size", "4",
          "--gradient_accumulation_steps", "2", "--per_device_eval_batch_size", "4", "--learning_rate", "1e-2",
          "--num_warmup_steps", "5", "--gumbel_temperature_decay", "0.99", "--seed", "0"]
PITCHES = (300.0, 500.0, 900.0, 1500.0, 2400.0)


def melody_clip(rng, sampling_rate, seconds):
    """A float32 clip of `seconds`: consecutive 40-100 ms segments, each a tone of one of `PITCHES` (jittered by
    3 %) with its second harmonic, plus white noise."""
    total = int(seconds * sampling_rate)
    wave = np.zeros(total)
    start = 0
    while start < total:
        length = min(int(rng.uniform(0.04, 0.1) * sampling_rate), total - start)
        t = np.arange(length) / sampling_rate
        f = rng.choice(PITCHES) * rng.uniform(0.97, 1.03)
        wave[start:start + length] = np.sin(2 * np.pi * f * t + rng.uniform(0, 2 * np.pi)) + 0.3 * np.sin(
            4 * np.pi * f * t)
        start += length
    wave = 0.4 * wave / 1.3 + rng.normal(0, 0.03, total)
    return np.clip(wave, -1, 1).astype(np.float32)


def write_melody_clips(root, count, seed, sampling_rate=8000, seconds=(0.25, 0.6), prefix="m"):
    """Writes `count` melody clips to root/<prefix>_<n>.<wav|flac> (every third FLAC, every fourth stereo), 16-bit.
    Returns the paths."""
    import soundfile

    rng = np.random.default_rng(seed)
    Path(root).mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        clip = melody_clip(rng, sampling_rate, rng.uniform(*seconds))
        if i % 4 == 3:
            clip = np.stack([clip, clip * 0.9], axis=1)
        path = Path(root) / f"{prefix}_{i:03d}.{'flac' if i % 3 == 2 else 'wav'}"
        soundfile.write(path, clip, sampling_rate, subtype="PCM_16")
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def melodies(tmp_path_factory):
    """train/: 60 clips, plus 2 of 0.05 s and 1 of 1.5 s (dropped by the duration filters of `run_args`);
    validation/: 15 clips."""
    root = tmp_path_factory.mktemp("melodies")
    write_melody_clips(root / "train", 60, seed=0)
    write_melody_clips(root / "train", 2, seed=2, seconds=(0.05, 0.05), prefix="short")
    write_melody_clips(root / "train", 1, seed=3, seconds=(1.5, 1.5), prefix="long")
    write_melody_clips(root / "validation", 15, seed=1)
    return root


def run_args(melodies, out, epochs=6, *extra):
    return ["--train_dir", melodies / "train", "--validation_dir", melodies / "validation", *TINY, *COMMON,
            "--min_duration_in_seconds", "0.1", "--max_duration_in_seconds", "1.0", "--num_train_epochs", str(epochs),
            "--output_dir", out, *extra]


def scalars(out, tag):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(next(out.rglob("events.out.tfevents.*")).parent))
    events.Reload()
    return {event.step: event.value for event in events.Scalars(tag)}


def evaluate_in_process(argv):
    """`main(argv)` in this process (an evaluation-only run: no launcher start-up); returns its results."""
    from accelerate.state import AcceleratorState

    try:
        return script.main([str(a) for a in argv])
    finally:
        AcceleratorState._reset_state()


@pytest.fixture(scope="module")
def learning_run(melodies, tmp_path_factory):
    """One process, 60 clips in windows of 2 x 4 (8 steps per epoch), 6 epochs, TensorBoard tracking; and the
    untrained model (the same seed builds the same weights) evaluated in-process on the same clips."""
    out = tmp_path_factory.mktemp("w2v2") / "out"
    result = launch(SCRIPT, run_args(melodies, out, 6, "--report_to", "tensorboard"))
    start = evaluate_in_process(["--validation_dir", melodies / "validation", *TINY, *COMMON, "--max_train_steps", "0",
                                 "--output_dir", out.parent / "untrained"])
    return {"out": out, "stdout": result.stdout, "results": read_results(out), "start": start}


def test_pretraining_learns_the_contrastive_task(learning_run):
    results, start = learning_run["results"], learning_run["start"]
    chance = math.log(NUM_NEGATIVES + 1)
    assert results["baseline"].startswith("chance: the true target among 10 distractors")
    assert results["eval_baseline_contrastive_loss"] == pytest.approx(chance)
    assert results["eval_baseline_contrastive_accuracy"] == pytest.approx(1 / 11)
    # The untrained model is no better than chance (its random similarities make it a confident guesser, often
    # worse); pretraining takes the held-out clips' loss far below both.
    assert start["eval_contrastive_loss"] > chance - 0.05, start
    assert results["eval_contrastive_loss"] < start["eval_contrastive_loss"] - 0.5, (start, results)
    assert results["eval_contrastive_loss"] < chance - 0.5, results
    # The true target ranked first: at chance (1/11) before, several times that after.
    assert start["eval_contrastive_accuracy"] < 0.15 and results["eval_contrastive_accuracy"] > 3 / 11, results
    # No collapse: the perplexity sums the two groups' exp(entropy) (2 = one codeword per group, 64 = all used).
    assert results["eval_codevector_perplexity"] > 4 * CODEBOOK[0], results
    assert results["eval_samples"] == 15 and start["eval_samples"] == 15
    assert results["eval_loss"] == pytest.approx(
        results["eval_contrastive_loss"] + 0.1 * results["eval_diversity_loss"])
    assert results["train_steps"] == 6 * 8 and results["train_samples"] == 6 * 60
    history = [json.loads(line) for line in (learning_run["out"] / "eval_history.jsonl").read_text().splitlines()]
    assert [(r["epoch"], r["step"]) for r in history] == [(e, 8 * (e + 1)) for e in range(6)]
    assert history[-1]["eval_contrastive_loss"] == results["eval_contrastive_loss"]
    # The same fixed evaluation masks every epoch: the masked share of the validation frames never changes.
    assert len({r["eval_masked_fraction"] for r in history} | {start["eval_masked_fraction"]}) == 1
    # Summary: the contrastive loss beside its chance level.
    summary = learning_run["stdout"].split("***** Summary *****", 1)[1]
    assert re.search(rf"eval_contrastive_loss +\d\.\d{{4}}   {chance:.4f}\n", summary), summary
    assert re.search(r"eval_contrastive_accuracy +0\.\d{4}   0\.0909\n", summary), summary


def test_duration_filters_report_what_they_dropped(learning_run):
    assert re.search(r"--train_dir \S+: 63 clips; dropped 1 longer than --max_duration_in_seconds 1\.0 and 2 shorter "
                     r"than --min_duration_in_seconds 0\.1; 60 left", learning_run["stdout"]), learning_run["stdout"]
    assert re.search(r"--validation_dir \S+: 15 clips; dropped 0 longer .* 0 shorter .*; 15 left",
                     learning_run["stdout"])


def test_every_step_logs_the_normalised_losses_and_the_annealed_temperature(learning_run):
    out, steps = learning_run["out"], range(1, 6 * 8 + 1)
    for tag in ("loss", "contrastive_loss", "diversity_loss", "codevector_perplexity", "gumbel_temperature",
                "grad_norm", "masked_fraction", "learning_rate"):
        assert sorted(scalars(out, tag)) == list(steps), tag
    temperature = scalars(out, "gumbel_temperature")
    for step in steps:  # step s (1-based) trained at max(2.0 x 0.99^(s-1), 0.5)
        assert temperature[step] == pytest.approx(max(2.0 * 0.99 ** (step - 1), 0.5), rel=1e-6)
    loss, contrastive, diversity = (scalars(out, tag) for tag in ("loss", "contrastive_loss", "diversity_loss"))
    for step in steps:  # loss = contrastive + 0.1 x diversity, all per masked frame of the window
        assert loss[step] == pytest.approx(contrastive[step] + 0.1 * diversity[step], rel=1e-5)
        assert 0 < diversity[step] < 1
    assert all(0.3 < value < 0.6 for value in scalars(out, "masked_fraction").values())
    # The first step no better than chance, the last ones well below it (the window-normalised training loss).
    assert contrastive[1] > math.log(11) - 0.05
    assert np.mean([contrastive[s] for s in steps[-8:]]) < math.log(11) - 0.5


def test_saved_folder_loads_for_fine_tuning(learning_run):
    from transformers import AutoFeatureExtractor, Wav2Vec2ForPreTraining, Wav2Vec2ForSequenceClassification

    out = learning_run["out"]
    saved = load_file(out / "model.safetensors")
    assert any(name.startswith("quantizer.") for name in saved)
    classifier = Wav2Vec2ForSequenceClassification.from_pretrained(out, num_labels=3).eval()
    encoder = {f"wav2vec2.{k}": v for k, v in classifier.wav2vec2.state_dict().items()}
    assert encoder and all(torch.equal(saved[name], value) for name, value in encoder.items())
    feature_extractor = AutoFeatureExtractor.from_pretrained(out)
    assert feature_extractor.sampling_rate == 16000 and feature_extractor.do_normalize
    inputs = feature_extractor([np.zeros(4000, np.float32)], sampling_rate=16000, return_tensors="pt")
    with torch.no_grad():
        assert classifier(**inputs).logits.shape == (1, 3)
    pretrained = Wav2Vec2ForPreTraining.from_pretrained(out)
    assert pretrained.config.num_negatives == NUM_NEGATIVES and pretrained.config.feat_extract_norm == "layer"


# ------------------------------------------------------------------------------------------------------ unit level
def tiny_config(**changes):
    from transformers import Wav2Vec2Config

    from common.tasks.config_overrides import apply_config_overrides

    return apply_config_overrides(Wav2Vec2Config(), TINY_OVERRIDES, changes or None)


def collator(stream=script.TRAIN_MASK_STREAM, seed=0, config=None):
    from transformers import Wav2Vec2FeatureExtractor

    return script.PretrainingCollator(Wav2Vec2FeatureExtractor(return_attention_mask=True), config or tiny_config(),
                                      0.5, 2, 2, seed, stream)


def clip(index, samples):
    return {"input_values": np.random.default_rng(index).normal(size=samples).astype(np.float32),
            "example_index": index}


def test_a_clips_masks_depend_on_its_seed_epoch_and_index_only():
    collate = collator()
    a, b, c = clip(3, 4000), clip(5, 9000), clip(8, 2500)
    state = np.random.get_state()
    first, second = collate([a, b]), collate([c, a])
    assert all(np.array_equal(x, y) for x, y in zip(np.random.get_state()[1:], state[1:]))  # global RNG untouched
    frames = int(first["frame_lengths"][0])
    assert frames == int(second["frame_lengths"][1]) == 49  # (4000 - 85) // 80 + 1
    assert first["mask_time_indices"].shape[1] > frames  # padded to b's length
    assert torch.equal(first["mask_time_indices"][0, :frames], second["mask_time_indices"][1, :frames])
    assert not first["mask_time_indices"][0, frames:].any()
    width = second["mask_time_indices"].shape[1]
    # Distractors index the flattened batch: row 1's are offset by one padded length.
    assert torch.equal(first["sampled_negative_indices"][0, :frames],
                       second["sampled_negative_indices"][1, :frames] - width)
    masked = first["mask_time_indices"][0]
    distractors = first["sampled_negative_indices"][0][masked]
    assert masked[distractors].all()  # distractors are masked frames of the same clip ...
    assert not (distractors == torch.nonzero(masked)[:, 0, None]).any()  # ... never the frame itself
    collate.epoch = 1
    assert not torch.equal(collate([a])["mask_time_indices"][0], first["mask_time_indices"][0, :frames])
    evaluation = collator(script.EVAL_MASK_STREAM, seed=42)
    evaluation.epoch = 0
    assert torch.equal(evaluation([a])["mask_time_indices"], evaluation([c, a])["mask_time_indices"][1:, :frames])


def test_minimum_clip_samples_is_the_shortest_clip_with_mask_length_plus_one_frames():
    from common.tasks.audio import conv_output_frames

    config = tiny_config()
    samples, field, frames = script.minimum_clip_samples(config, 2)
    assert (samples, field, frames) == (85 + 2 * 80, 85, 3)
    assert conv_output_frames(config, samples) == 3 and conv_output_frames(config, samples - 1) == 2
    assert script.example_masks(3, [0, 0, 0, 0], 0.5, 2, 2, 10)[0].sum() == 2  # one span fits, one frame visible


def test_per_clip_contrastive_losses_add_up_to_the_models():
    from transformers import Wav2Vec2ForPreTraining

    torch.manual_seed(0)
    model = Wav2Vec2ForPreTraining(tiny_config()).eval()
    batch = collator()([clip(i, n) for i, n in enumerate((3000, 7000, 5200))])
    with torch.no_grad():
        outputs = model(**script.model_inputs(batch))
    losses, correct = script.example_contrastive_scores(
        outputs, batch["mask_time_indices"], batch["sampled_negative_indices"],
        model.config.contrastive_logits_temperature)
    assert losses.shape == correct.shape == (3,) and (losses > 0).all()
    assert (correct <= batch["mask_time_indices"].sum(-1)).all()
    assert losses.sum().item() == pytest.approx(outputs.contrastive_loss.item(), rel=1e-5)


def test_gradient_scale():
    assert script.gradient_scale(2, 3, 60) == pytest.approx(0.1)
    assert script.gradient_scale(1, 1, 7) == pytest.approx(1 / 7)
    assert script.gradient_scale(4, 2, 0) == 0.0


# ------------------------------------------------------------------------- the gradient of the normalised loss
# Launched with 1 or 2 processes. Each process takes 3 micro-batches of 2 clips from one list of 6 x N clips of very
# different lengths (so the micro-batches mask very different numbers of frames) through the script's loop body
# (micro_batch_loss, accelerator.backward, finish_window) inside accelerator.accumulate, with
# --gradient_accumulation_steps 2: a window of 2 micro-batches, then a partial one of 1 (the end of the DataLoader).
# The gradient the optimizer receives (SGD at learning rate 0, so the weights stay put) is compared with the gradient
# of a reference copy of the model: the sum of the model's losses over all the window's micro-batches of all processes,
# divided by their masked frames. Dropout and LayerDrop are 0 and the Gumbel noise is replaced by a deterministic
# straight-through argmax, so both computations see the same function. `peer` replays the transformers example's
# normalisation (after every micro-batch's backward, the accumulated gradients multiplied by N / that micro-batch's
# masked frames).
GRADIENT_CHECK = textwrap.dedent('''
    import json, sys
    sys.path[:0] = [{repo!r}, {examples!r}]
    import numpy as np, torch
    from accelerate import Accelerator
    from transformers import Wav2Vec2Config, Wav2Vec2FeatureExtractor, Wav2Vec2ForPreTraining
    import run_wav2vec2_pretraining as script
    from common.tasks.config_overrides import apply_config_overrides

    def straight_through(logits, tau=1.0, hard=True, dim=-1):
        soft = torch.softmax(logits / tau, dim=dim)
        hard_codes = torch.zeros_like(soft).scatter_(dim, soft.argmax(dim, keepdim=True), 1.0)
        return hard_codes - soft.detach() + soft

    torch.nn.functional.gumbel_softmax = straight_through
    accelerator = Accelerator(gradient_accumulation_steps=2)
    N = accelerator.num_processes
    zero = {{k: 0.0 for k in ("hidden_dropout", "attention_dropout", "activation_dropout", "feat_proj_dropout",
                              "final_dropout", "layerdrop", "feat_quantizer_dropout")}}
    config = apply_config_overrides(Wav2Vec2Config(), {overrides!r}, zero)
    torch.manual_seed(0)
    initial = Wav2Vec2ForPreTraining(config).state_dict()
    collate = script.PretrainingCollator(Wav2Vec2FeatureExtractor(return_attention_mask=True), config, 0.5, 2, 2,
                                         seed=0, stream=script.TRAIN_MASK_STREAM)
    rng = np.random.default_rng(0)
    lengths = [int(n) for n in rng.choice([1500, 2500, 9000, 16000], size=6 * N)]
    clips = [{{"input_values": rng.normal(size=n).astype(np.float32), "example_index": i}}
             for i, n in enumerate(lengths)]
    batches = [collate(clips[k:k + 2]) for k in range(0, len(clips), 2)]  # batch j*N + p is process p's j-th
    windows = [batches[:2 * N], batches[2 * N:]]

    # The reference: the gradient of sum(model losses of a window's micro-batches, all processes) / masked frames.
    reference = Wav2Vec2ForPreTraining(config)
    reference.load_state_dict(initial)
    reference.train()
    expected, losses = [], []
    for window_batches in windows:
        reference.zero_grad()
        masked = sum(b["mask_time_indices"].sum() for b in window_batches)
        loss = sum(reference(**script.model_inputs(b)).loss for b in window_batches) / masked
        loss.backward()
        expected.append([torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in reference.parameters()])
        losses.append(loss.item())

    def peer_backward(outputs, batch, accelerator, window):
        accelerator.backward(outputs.loss)  # accelerate divides by GA, as the example does by hand
        num_losses = accelerator.reduce(batch["mask_time_indices"].sum(), reduction="sum")
        script.scale_gradients(accelerator.unwrap_model(model).parameters(), N / num_losses.item())
        window.add(outputs, batch)

    def our_backward(outputs, batch, accelerator, window):  # the script's loop body
        accelerator.backward(script.micro_batch_loss(outputs, batch, accelerator))
        window.add(outputs, batch)

    results = {{"masked": [int(b["mask_time_indices"].sum()) for b in batches], "losses": losses}}
    for mode, backward in (("ours", our_backward), ("peer", peer_backward)):
        if mode == "peer":
            script.gradient_scale = lambda *args: 1.0  # no rescaling at the window's end
        model = Wav2Vec2ForPreTraining(config)
        model.load_state_dict(initial)
        loader = torch.utils.data.DataLoader(clips, batch_size=2, collate_fn=collate)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
        captured = []
        optimizer.register_step_pre_hook(lambda *_: captured.append(
            [torch.zeros_like(p) if p.grad is None else p.grad.detach().clone() for p in model.parameters()]))
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        window, logged = script.WindowTotals(accelerator.device), []
        model.train()
        for batch in loader:
            with accelerator.accumulate(model):
                outputs = model(**script.model_inputs(batch))
                backward(outputs, batch, accelerator, window)
                if accelerator.sync_gradients:
                    logged.append(script.finish_window(model, accelerator, window)["loss"])
                optimizer.step()
                optimizer.zero_grad()
        errors = []
        for grads, wanted in zip(captured, expected):
            scale = max(w.abs().max().item() for w in wanted)
            errors.append(max((g - w).abs().max().item() for g, w in zip(grads, wanted)) / scale)
        results[mode] = {{"errors": errors, "logged": logged, "windows": len(captured)}}
    if accelerator.is_main_process:
        json.dump(results, open(sys.argv[1], "w"))
''')


def gradient_check(tmp_path, num_processes):
    helper = tmp_path / "gradient_check.py"
    helper.write_text(GRADIENT_CHECK.format(repo=str(REPO), examples=str(EXAMPLES), overrides=TINY_OVERRIDES))
    output = tmp_path / f"gradients_{num_processes}.json"
    if num_processes == 1:
        command = [sys.executable, str(helper), str(output)]
    else:
        command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes",
                   str(num_processes), "--main_process_port", str(_free_port()), str(helper), str(output)]
    env = {**os.environ, **OFFLINE_ENV, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout[-4000:]
    return json.loads(output.read_text())


@pytest.mark.parametrize("num_processes", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_the_step_gradient_is_that_of_the_loss_per_masked_frame_of_the_whole_window(tmp_path, num_processes):
    check = gradient_check(tmp_path, num_processes)
    ours, peer = check["ours"], check["peer"]
    print(json.dumps(check))
    assert ours["windows"] == peer["windows"] == 2  # a full window of 2 micro-batches, the epoch's last one of 1
    assert max(check["masked"]) > 3 * min(check["masked"]), check["masked"]  # micro-batches weigh very differently
    assert max(ours["errors"]) < 1e-5, check
    assert ours["logged"] == pytest.approx(check["losses"], rel=1e-5)  # the logged loss is the window's too
    # The transformers example's normalisation gives another gradient on the same data: the check can fail.
    assert peer["errors"][0] > 0.05, check


# ------------------------------------------------------------------------------------------------------ bad inputs
@pytest.fixture(scope="module")
def tones(tmp_path_factory):
    """30 tone clips (conftest.write_tone_clips) in class folders, listed (absolute paths) in tones.csv."""
    root = tmp_path_factory.mktemp("tones")
    written = write_tone_clips(root / "clips", per_class=10, seed=0)
    listing = write(root, "tones.csv", "audio\n" + "".join(f"{path}\n" for path, _ in written))
    return root, listing


@pytest.fixture
def finished_run(tmp_path):
    return make_finished_run(tmp_path / "out")


def bad_args(train_file, out, *extra):
    return ["--train_file", train_file, "--validation_file", train_file, *TINY, *COMMON, "--output_dir", out,
            "--overwrite_output_dir", *extra]


def test_an_unreadable_or_empty_clip_is_named_with_its_row(tones, tmp_path, finished_run, capsys):
    root, listing = tones
    empty = write(tmp_path, "empty.wav", b"")
    text = write(tmp_path, "notes.wav", "not audio")
    rows = listing.read_text().splitlines()
    bad = write(tmp_path, "bad.csv", "\n".join(rows[:4] + [str(empty)] + rows[4:8] + [str(text)]) + "\n")
    message = assert_rejected(script.main, bad_args(bad, finished_run), r"2 unreadable audio clip\(s\)", finished_run,
                              capsys)
    assert f"row 3: {empty}" in message and f"row 8: {text}" in message, message


def test_a_clip_too_short_for_the_encoder_and_masks_names_its_row_and_the_flag(tones, tmp_path, finished_run, capsys):
    import soundfile

    root, listing = tones
    short = tmp_path / "short.wav"
    soundfile.write(short, np.zeros(100, np.float32) + 0.1, 8000)  # 200 samples at 16 kHz < 85 + 2 x 80 = 245
    rows = listing.read_text().splitlines()
    bad = write(tmp_path, "short.csv", "\n".join(rows[:6] + [str(short)] + rows[6:]) + "\n")
    message = assert_rejected(script.main, bad_args(bad, finished_run), r"1 clip\(s\) shorter than 0\.015 s",
                              finished_run, capsys)
    assert f"row 5: {short}: 0.013 s" in message, message
    assert "--mask_time_length 2" in message and "--min_duration_in_seconds 0.016" in message, message
    # The flag the message names drops the clip, and the run then starts (here: evaluation only).
    results = evaluate_in_process(["--validation_file", bad, *TINY, *COMMON, "--max_train_steps", "0",
                                   "--min_duration_in_seconds", "0.016", "--output_dir", tmp_path / "eval"])
    assert results["eval_samples"] == 30


@pytest.mark.parametrize("overrides, match", [
    ("feat_extract_norm=group", r"feat_extract_norm='group'.*GroupNorm.*feat_extract_norm=layer"),
    ("apply_spec_augment=false", r"apply_spec_augment=false makes the model ignore the time masks"),
    ("hidden_dropout=0.1,no_such_key=1",
     r"--config_overrides: Wav2Vec2Config has no attribute\(s\) \['no_such_key'\]"),
])
def test_configs_this_pretraining_would_train_wrongly_are_refused(tones, finished_run, capsys, overrides, match):
    argv = bad_args(tones[1], finished_run)
    argv[argv.index(TINY_OVERRIDES)] = f"{TINY_OVERRIDES},{overrides}"
    assert_rejected(script.main, argv, match, finished_run, capsys)


@pytest.mark.parametrize("extra, match", [
    (["--mask_time_prob", "1.5"], r"--mask_time_prob 1\.5: expected a fraction in \(0, 1\]"),
    (["--min_duration_in_seconds", "2", "--max_duration_in_seconds", "1"], r"--min_duration_in_seconds 2\.0"),
    (["--min_gumbel_temperature", "3"], r"--min_gumbel_temperature 3\.0 is above --max_gumbel_temperature 2\.0"),
    (["--test_file", "x.csv"], r"--test_file is not used by this script"),
])
def test_bad_flags_are_refused(tones, finished_run, capsys, extra, match):
    assert_rejected(script.main, bad_args(tones[1], finished_run, *extra), match, finished_run, capsys)


def test_an_earlier_runs_output_dir_is_refused_without_overwrite(tones, finished_run, capsys):
    argv = [a for a in bad_args(tones[1], finished_run) if a != "--overwrite_output_dir"]
    assert_rejected(script.main, argv, r"--output_dir \S+ already holds results of an earlier run", finished_run,
                    capsys)


# ------------------------------------------------------------------------------------------------------------ slow
@pytest.fixture(scope="module")
def two_process_run(melodies, tmp_path_factory):
    """2 processes x batches of 4, no accumulation (8 steps per epoch), 5 epochs, a checkpoint every 6 steps."""
    out = tmp_path_factory.mktemp("w2v2_2proc") / "out"
    args = run_args(melodies, out, 5, "--gradient_accumulation_steps", "1", "--checkpointing_steps", "6")
    launch(SCRIPT, args, num_processes=2)
    return {"args": args, "out": out, "results": read_results(out)}


@pytest.mark.slow  # 2 launches
def test_evaluation_is_the_same_on_one_and_two_processes(two_process_run, melodies, tmp_path):
    """The saved model evaluated on 1 and on 2 processes gives exactly the 2-process training run's final values
    (15 validation clips in batches of 4: on 2 processes the last batch is filled up with a repeated clip)."""
    trained = two_process_run["results"]
    assert trained["train_steps"] == 5 * 8 and trained["eval_contrastive_loss"] < math.log(11) - 0.3, trained
    metrics = ("eval_loss", "eval_contrastive_loss", "eval_contrastive_accuracy", "eval_diversity_loss",
               "eval_codevector_perplexity", "eval_masked_fraction", "eval_samples")
    for processes in (1, 2):
        out = tmp_path / f"eval_{processes}"
        launch(SCRIPT, ["--model_name_or_path", two_process_run["out"], "--validation_dir", melodies / "validation",
                        *COMMON, "--max_train_steps", "0", "--output_dir", out], num_processes=processes)
        assert {k: read_results(out)[k] for k in metrics} == {k: trained[k] for k in metrics}, processes


@pytest.mark.slow  # a 2-process launch
def test_two_process_resume_mid_epoch_gives_the_same_weights(two_process_run, tmp_path):
    first = two_process_run["out"]
    assert (first / "step_12").is_dir()  # epoch 1, after its fourth of 8 steps
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(first / "step_12", resumed / "step_12")
    args = list(two_process_run["args"])
    args[args.index("--output_dir") + 1] = resumed
    launch(SCRIPT, args + ["--resume_from_checkpoint", "latest"], num_processes=2)
    expected, actual = load_file(first / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert expected.keys() == actual.keys() and all(torch.equal(expected[k], actual[k]) for k in expected)
    assert read_results(resumed)["eval_contrastive_loss"] == two_process_run["results"]["eval_contrastive_loss"]


@pytest.mark.slow  # DeepSpeed start-up (~30 s the first time: it compiles an op)
def test_deepspeed_normalises_per_micro_batch_and_says_so(melodies, tmp_path):
    try:
        import deepspeed  # noqa: F401
    except Exception as error:
        pytest.skip(f"DeepSpeed not usable here: {type(error).__name__}: {error}")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(REPO / "configs" /
               "deepspeed_zero2.yaml"), "--num_processes", "1", "--mixed_precision", "no", "--main_process_port",
               str(_free_port()), str(EXAMPLES / SCRIPT),
               *map(str, run_args(melodies, out, 6, "--gradient_accumulation_steps", "1",
                                  "--per_device_train_batch_size", "8"))]
    env = {**os.environ, **OFFLINE_ENV, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    result = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:]
    assert "Distributed environment: DEEPSPEED" in result.stdout
    assert "each micro-batch's loss is normalised by its own masked frames" in result.stdout
    results = read_results(out)
    assert results["eval_contrastive_loss"] < math.log(11) - 0.5, results

"""Issue 36: the gradient of an optimizer step is that of the mean loss per item (label token, or example) of its
whole accumulation window on all processes, whatever the split into micro-batches and processes
(`common.accumulation`, `TrainingRun.summed_loss` / `normalize_gradients`, the lines every script runs).

Launched with 1 and 2 processes: a tiny causal LM (no dropout) on padded sequences of very unequal lengths
(labels -100 on the padding, so micro-batches hold very different numbers of label tokens) is run through the
scripts' loop body inside `accelerator.accumulate`, at per-device batch 16 x GA 1 and batch 4 x GA 4; the gradient
each optimizer step receives (SGD at learning rate 0: the weights stay put) is compared with that of a reference
copy: the sum of the per-token losses of all the window's sequences divided by their label tokens. The data ends in
a short last window (1 process: a batch of 4 after one of 16, and a window of 1 micro-batch of 4; 2 processes:
batch 4 x GA 4, a last window of 1 micro-batch per process). Also the example-level default (`count_examples`) on a
last batch of another size, and the pre-fix behaviour as a control (it fails the same check)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import OFFLINE_ENV, REPO, _free_port

CHECK = textwrap.dedent('''
    import json, sys
    from types import SimpleNamespace
    sys.path[:0] = [{repo!r}]
    import torch
    from accelerate import Accelerator
    from accelerate.logging import get_logger
    from accelerate.utils import gather_object
    from transformers import GPT2Config, GPT2ForSequenceClassification, GPT2LMHeadModel
    from common.accumulation import count_examples, label_tokens
    from common.optimization import StepPlan
    from common.run import TrainingRun

    num_examples, unit, tmp = int(sys.argv[2]), sys.argv[3], sys.argv[4]
    config = GPT2Config(vocab_size=40, n_positions=64, n_embd=16, n_layer=1, n_head=2, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0, pad_token_id=39, num_labels=2)
    # a token-level loss (causal LM) or an example-level one (sequence classification, its last real token)
    Model = GPT2LMHeadModel if unit == "tokens" else GPT2ForSequenceClassification
    torch.manual_seed(0)
    initial = Model(config).state_dict()
    generator = torch.Generator().manual_seed(1)
    lengths = [int(n) for n in torch.randint(2, 40, (num_examples,), generator=generator)]
    rows = [torch.randint(0, 39, (n,), generator=generator) for n in lengths]

    def collate(items):
        indices, examples = [i for i, _ in items], [e for _, e in items]
        width = max(len(e) for e in examples)
        ids = torch.full((len(examples), width), 39, dtype=torch.long)
        mask = torch.zeros(len(examples), width, dtype=torch.long)
        for i, e in enumerate(examples):
            ids[i, :len(e)], mask[i, :len(e)] = e, 1
        if unit == "examples":
            labels = torch.tensor([int(e[0]) % 2 for e in examples])
        else:
            labels = ids.masked_fill(mask == 0, -100)
        return {{"input_ids": ids, "attention_mask": mask, "labels": labels, "index": torch.tensor(indices)}}

    def reference_gradients(windows):
        model = Model(config)
        model.load_state_dict(initial)
        model.train()
        result = []
        for window in windows:  # the mean over the window's label tokens (or examples) of the per-item losses
            model.zero_grad()
            total, items = 0.0, 0
            for index in window:  # (an example the sampler repeated to even out the processes counts twice)
                batch = collate([(index, rows[index])])
                batch.pop("index")
                loss = model(**batch).loss
                n = int((batch["labels"][..., 1:] != -100).sum()) if unit == "tokens" else 1
                total = total + loss * n
                items += n
            (total / items).backward()
            result.append([p.grad.clone() for p in model.parameters()])
        return result

    results = {{}}
    for batch_size, accumulation in ((16, 1), (4, 4)):
        for mode in ("fixed", "mean"):
            accelerator = Accelerator(gradient_accumulation_steps=accumulation)
            model = Model(config)
            model.load_state_dict(initial)
            loader = torch.utils.data.DataLoader(list(enumerate(rows)), batch_size=batch_size, collate_fn=collate)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
            captured = []
            optimizer.register_step_pre_hook(lambda *_: captured.append(
                [p.grad.detach().clone() for p in model.parameters()]))
            model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
            args = SimpleNamespace(output_dir=tmp, per_device_train_batch_size=batch_size,
                                   gradient_accumulation_steps=accumulation, checkpointing_steps=None,
                                   checkpoints_total_limit=None, with_tracking=False, max_grad_norm=0.0)
            steps = -(-len(loader) // accumulation)
            run = TrainingRun(accelerator, args, StepPlan(len(loader), steps, steps, 1), loader, optimizer,
                              get_logger("check"), loss_items=label_tokens(shift=1) if unit == "tokens"
                              else count_examples)
            windows, window = [], []  # the examples of each window, all processes (the sampler's repeats too)
            model.train()
            for batch in loader:
                window += batch.pop("index").tolist()  # the batch the scripts see, without this bookkeeping
                with accelerator.accumulate(model):
                    loss = model(**batch).loss
                    if mode == "fixed":  # the scripts' lines
                        accelerator.backward(run.summed_loss(loss, batch))
                        if accelerator.sync_gradients:
                            run.normalize_gradients(model)
                    else:  # before: the micro-batch mean, as accelerate alone does it
                        accelerator.backward(loss)
                    if accelerator.sync_gradients:
                        windows.append(gather_object(window))
                        window = []
                    optimizer.step()
                    optimizer.zero_grad()
            expected = reference_gradients(windows)
            errors = []
            for grads, wanted in zip(captured, expected):
                scale = max(w.abs().max().item() for w in wanted)
                errors.append(max((g - w).abs().max().item() for g, w in zip(grads, wanted)) / scale)
            results[f"{{batch_size}}x{{accumulation}}/{{mode}}"] = {{
                "errors": errors, "windows": [len(w) for w in windows], "steps": len(captured),
                "grads": [[g.flatten()[:50].tolist() for g in grads[:3]] for grads in captured]}}
    if accelerator.is_main_process:
        json.dump(results, open(sys.argv[1], "w"))
''')


def gradient_check(tmp_path, num_processes, num_examples, unit):
    helper = tmp_path / "accumulation_check.py"
    helper.write_text(CHECK.format(repo=str(REPO)))
    output = tmp_path / f"gradients_{num_processes}_{unit}.json"
    args = [str(helper), str(output), str(num_examples), unit, str(tmp_path / "out")]
    if num_processes == 1:
        command = [sys.executable, *args]
    else:
        command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes",
                   str(num_processes), "--main_process_port", str(_free_port()), *args]
    env = {**os.environ, **OFFLINE_ENV, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(REPO)}
    result = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout[-4000:]
    return json.loads(output.read_text())


@pytest.mark.parametrize("num_processes, num_examples, unit", [
    (1, 20, "tokens"),  # windows of 16 and 4 sequences: at 4 x 4 the last window is 1 micro-batch
    pytest.param(1, 22, "examples", marks=pytest.mark.slow),  # a last batch of 2 / a last window of 4 + 2
    pytest.param(2, 72, "tokens", marks=pytest.mark.slow),  # 4 x 4: a last window of 1 micro-batch per process
])
def test_step_gradient_is_that_of_the_window_mean_per_item(tmp_path, num_processes, num_examples, unit):
    check = gradient_check(tmp_path, num_processes, num_examples, unit)
    for config in ("16x1", "4x4"):
        fixed, before = check[f"{config}/fixed"], check[f"{config}/mean"]
        assert fixed["steps"] == len(fixed["windows"]) >= 2, fixed
        assert max(fixed["errors"]) < 1e-5, (config, fixed["errors"], fixed["windows"])
        if config == "4x4" or num_processes > 1:
            # The control: micro-batch means divided by the full accumulation (averaged over processes) fail the
            # same check (at 16 x 1 on one process every window is one micro-batch, whose mean is the window's).
            assert max(before["errors"]) > 1e-2, (config, before["errors"])
    if num_processes == 1 or num_examples % 32 == 0:  # both splits form the same windows: the same gradients
        for a, b in zip(check["16x1/fixed"]["grads"], check["4x4/fixed"]["grads"]):
            for x, y in zip(a, b):
                assert x == pytest.approx(y, rel=1e-4, abs=1e-7)

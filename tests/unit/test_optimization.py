from types import SimpleNamespace

import pytest
import torch
from transformers import BertConfig, BertModel

from common.optimization import batches_per_process, build_lr_scheduler, build_optimizer, training_steps


def fake_accelerator(num_processes, split_batches=False):
    # Only the two attributes the functions read; the real 2-process behaviour is checked end to end
    # in tests/examples/test_run_glue.py::test_two_processes_learn_scores_every_example_and_schedule_is_exact.
    return SimpleNamespace(num_processes=num_processes, split_batches=split_batches)


@pytest.mark.parametrize(
    "num_batches,ga,epochs,max_steps,expected",
    [
        (30, 1, 3, None, (30, 90, 3)),
        (30, 4, 3, None, (8, 24, 3)),  # 7 full windows of 4 + one partial window of 2 per epoch
        (30, 4, 3, 10, (8, 10, 2)),  # --max_train_steps overrides the epochs: ceil(10 / 8) = 2
        (32, 4, 1, None, (8, 8, 1)),
        (1, 8, 2, None, (1, 2, 2)),
    ],
)
def test_training_steps(num_batches, ga, epochs, max_steps, expected):
    assert training_steps(num_batches, ga, epochs, max_steps) == expected


@pytest.mark.parametrize("num_batches,processes,split,expected", [(25, 1, False, 25), (25, 2, False, 13),
                                                                   (24, 2, False, 12), (25, 2, True, 25)])
def test_batches_per_process(num_batches, processes, split, expected):
    assert batches_per_process(num_batches, fake_accelerator(processes, split)) == expected


def test_optimizer_groups_exclude_biases_and_norms():
    model = BertModel(BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=16))
    optimizer = build_optimizer(model, learning_rate=1e-3, weight_decay=0.01)
    decay, no_decay = optimizer.param_groups
    names = {id(p): n for n, p in model.named_parameters()}
    decay_names = {names[id(p)] for p in decay["params"]}
    no_decay_names = {names[id(p)] for p in no_decay["params"]}
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    assert "encoder.layer.0.attention.self.query.weight" in decay_names
    assert "encoder.layer.0.attention.self.query.bias" in no_decay_names
    assert "embeddings.LayerNorm.weight" in no_decay_names
    assert "encoder.layer.0.output.LayerNorm.weight" in no_decay_names
    assert not any("bias" in n or "LayerNorm" in n for n in decay_names)
    assert len(decay_names) + len(no_decay_names) == len(list(model.parameters()))


@pytest.mark.parametrize("processes", [1, 2, 4])
def test_scheduler_reaches_warmup_and_end_exactly(processes):
    """Replays what accelerate's AcceleratedScheduler does on each optimizer step (step the wrapped
    scheduler num_processes times) and checks the schedule in optimizer steps."""
    max_train_steps, warmup, peak = 20, 5, 1e-3
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([param], lr=peak)
    scheduler = build_lr_scheduler(optimizer, "linear", warmup, max_train_steps, fake_accelerator(processes))
    lrs = []
    for _ in range(max_train_steps):
        optimizer.step()
        for _ in range(processes):
            scheduler.step()
        lrs.append(scheduler.get_last_lr()[0])
    assert lrs[warmup - 1] == pytest.approx(peak)  # peak right after the last warmup step
    assert lrs[warmup - 2] == pytest.approx(peak * (warmup - 1) / warmup)
    assert lrs[-1] == pytest.approx(0.0, abs=1e-12)  # the end exactly at max_train_steps
    assert lrs[-2] > 0


def test_lr_overrides_put_matching_parameters_in_groups_of_their_own():
    """{prefix: rate}: parameters under the prefix get that rate (decay and no-decay groups each); the others keep
    the base rate; a scheduler scales both by the same factor."""
    from transformers import get_scheduler

    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.LayerNorm(3), torch.nn.Linear(3, 1))
    optimizer = build_optimizer(model, 1e-3, 0.1, lr_overrides={"0.": 1e-5})
    groups = [(g["lr"], g["weight_decay"], sorted(p.shape for p in g["params"])) for g in optimizer.param_groups]
    assert groups == [
        (1e-3, 0.1, [torch.Size([1, 3])]),  # 2.weight
        (1e-3, 0.0, [torch.Size([1]), torch.Size([3]), torch.Size([3])]),  # 2.bias, LayerNorm weight and bias
        (1e-5, 0.1, [torch.Size([3, 2])]),  # 0.weight
        (1e-5, 0.0, [torch.Size([3])]),  # 0.bias
    ]
    scheduler = get_scheduler("linear", optimizer, num_warmup_steps=0, num_training_steps=4)
    optimizer.step()
    scheduler.step()
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([7.5e-4, 7.5e-4, 7.5e-6, 7.5e-6])
    assert len(build_optimizer(model, 1e-3, 0.1).param_groups) == 2  # unchanged without overrides


@pytest.mark.parametrize("value,ok", [("1e-5", True), ("0", False), ("-1", False), ("inf", False), ("nan", False),
                                      ("x", False)])
def test_positive_float(value, ok):
    import argparse

    from common.args import positive_float

    if ok:
        assert positive_float(value) == float(value)
    else:
        with pytest.raises(argparse.ArgumentTypeError, match="expected a positive number"):
            positive_float(value)

"""common/optimization.py: the run's step plan (`plan_training_steps`), `--optim` / `fused` reaching AdamW, and
which parameters get weight decay in corner cases (found by `make mutation`, docs/mutation.md)."""

from argparse import Namespace
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DataLoader

from common.optimization import StepPlan, build_optimizer, plan_training_steps


def stand_in_accelerator(num_processes, split_batches=False):
    # The two attributes plan_training_steps reads (the Accelerator is not the unit under test).
    return SimpleNamespace(num_processes=num_processes, split_batches=split_batches)


def flags(gradient_accumulation_steps=1, num_train_epochs=3, max_train_steps=None):
    return Namespace(gradient_accumulation_steps=gradient_accumulation_steps, num_train_epochs=num_train_epochs,
                     max_train_steps=max_train_steps)


@pytest.mark.parametrize("processes,split,ga,epochs,max_steps,expected", [
    # 25 batches on 1 process, GA 1, 3 epochs: 25 steps per epoch, 75 in all.
    (1, False, 1, 3, None, StepPlan(25, 25, 75, 3)),
    # 2 processes: ceil(25 / 2) = 13 batches each; GA 4: ceil(13 / 4) = 4 steps per epoch; 3 epochs = 12 steps.
    (2, False, 4, 3, None, StepPlan(13, 4, 12, 3)),
    # split_batches: every process sees all 25 (smaller) batches: ceil(25 / 4) = 7 steps per epoch, 21 in all.
    (2, True, 4, 3, None, StepPlan(25, 7, 21, 3)),
    # --max_train_steps 10 wins over the epochs: ceil(10 / 4) = 3 epochs of 4 steps.
    (2, False, 4, 1, 10, StepPlan(13, 4, 10, 3)),
])
def test_plan_training_steps_hand_computed(processes, split, ga, epochs, max_steps, expected):
    dataloader = DataLoader(list(range(100)), batch_size=4)  # 25 batches before prepare
    plan = plan_training_steps(flags(ga, epochs, max_steps), dataloader, stand_in_accelerator(processes, split))
    assert plan == expected


def test_plan_without_training_data_is_evaluation_only():
    # No DataLoader (e.g. --max_train_steps 0 to evaluate): 0 batches; the arithmetic uses 1 batch so that
    # nothing divides by zero: 1 step per epoch (GA 1), and --max_train_steps 0 steps in 0 epochs.
    plan = plan_training_steps(flags(1, 3, 0), None, stand_in_accelerator(2))
    assert plan == StepPlan(num_batches=0, num_update_steps_per_epoch=1, max_train_steps=0, num_train_epochs=0)
    # No training data and no --max_train_steps (run_glue with only --validation_file): evaluation only too, not
    # 3 epochs of a missing DataLoader (the banner said "Running training ... Num examples = 0", then it crashed).
    plan = plan_training_steps(flags(1, 3, None), None, stand_in_accelerator(1))
    assert plan.max_train_steps == 0 and plan.num_train_epochs == 0


def test_optim_choices_and_fused_reach_adamw():
    model = torch.nn.Linear(4, 2)
    assert build_optimizer(model, 1e-3, 0.1, optim="adamw_torch_foreach").defaults["foreach"] is True
    assert build_optimizer(model, 1e-3, 0.1, optim="adamw_torch_fused").defaults["fused"] is True
    plain = build_optimizer(model, 1e-3, 0.1).defaults
    assert plain["foreach"] is None and plain["fused"] is None  # torch chooses
    # An explicit fused= wins over --optim.
    assert build_optimizer(model, 1e-3, 0.1, fused=True).defaults["fused"] is True
    explicit = build_optimizer(model, 1e-3, 0.1, fused=False, optim="adamw_torch_foreach").defaults
    assert explicit["fused"] is False and explicit["foreach"] is None
    assert build_optimizer(model, 2e-3, 0.1).defaults["lr"] == 2e-3


def test_unknown_optim_is_refused_naming_the_choices():
    with pytest.raises(ValueError) as error:
        build_optimizer(torch.nn.Linear(4, 2), 1e-3, 0.1, optim="sgd")
    assert str(error.value) == ("--optim sgd: expected one of adamw_torch, adamw_torch_foreach, adamw_torch_fused, "
                                "schedule_free_adamw.")


def test_parameters_of_the_model_itself_are_grouped_by_their_own_names():
    # A bare Linear as the whole model: its bias (name "bias", no module prefix) gets no decay, its weight does.
    model = torch.nn.Linear(4, 2)
    decay, no_decay = build_optimizer(model, 1e-3, 0.01).param_groups
    assert decay["params"] == [model.weight] and no_decay["params"] == [model.bias]
    # A bare LayerNorm: both parameters are normalisation parameters.
    norm = torch.nn.LayerNorm(4)
    decay, no_decay = build_optimizer(norm, 1e-3, 0.01).param_groups
    assert decay["params"] == [] and no_decay["params"] == [norm.weight, norm.bias]


class PreNormBlock(torch.nn.Module):
    """A container whose class name contains "norm" but whose own children are a LayerNorm and a Linear."""

    def __init__(self):
        super().__init__()
        self.layer_norm = torch.nn.LayerNorm(4)
        self.dense = torch.nn.Linear(4, 4)


def test_only_the_normalisation_module_itself_counts_not_a_container_named_like_one():
    model = torch.nn.Sequential(PreNormBlock())
    decay, no_decay = build_optimizer(model, 1e-3, 0.01).param_groups
    block = model[0]
    assert decay["params"] == [block.dense.weight]
    assert no_decay["params"] == [block.layer_norm.weight, block.layer_norm.bias, block.dense.bias]

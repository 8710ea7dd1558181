"""Issue 36, the optimizer flags of every script (common/optimization.py, common/args.py): `--adam_beta1`,
`--adam_beta2`, `--adam_epsilon` reach the optimizer; `--optim schedule_free_adamw` builds schedulefree's
AdamWScheduleFree with no learning-rate schedule, and the rate logged for a step is the one its warmup used;
`--max_grad_norm` is a non-negative number, 0 meaning "measure, do not clip" (`TrainingRun.max_grad_norm`)."""

import argparse
import math
from types import SimpleNamespace

import pytest
import schedulefree
import torch

from common.args import add_common_args, check_optimizer_args
from common.optimization import build_lr_scheduler, build_optimizer, is_schedule_free, optimizer_options
from common.run import TrainingRun, current_learning_rate


def parse(*flags):
    parser = argparse.ArgumentParser()
    add_common_args(parser, file_extensions=("csv",))
    return parser.parse_args(["--output_dir", "x", *flags])


def test_adam_flags_reach_adamw():
    args = parse("--adam_beta1", "0.8", "--adam_beta2", "0.95", "--adam_epsilon", "1e-6")
    optimizer = build_optimizer(torch.nn.Linear(4, 2), 1e-3, 0.1, **optimizer_options(args))
    assert type(optimizer) is torch.optim.AdamW
    assert optimizer.defaults["betas"] == (0.8, 0.95) and optimizer.defaults["eps"] == 1e-6
    plain = build_optimizer(torch.nn.Linear(4, 2), 1e-3, 0.1, **optimizer_options(parse()))
    assert plain.defaults["betas"] == (0.9, 0.999) and plain.defaults["eps"] == 1e-8  # AdamW's and Trainer's


@pytest.mark.parametrize("flags, message", [
    (["--adam_beta1", "1.0"], r"--adam_beta1 1\.0: expected a value in \[0, 1\)"),
    (["--adam_beta2", "-0.1"], r"--adam_beta2 -0\.1: expected a value in \[0, 1\)"),
    (["--optim", "schedule_free_adamw", "--lr_scheduler_type", "cosine"],
     r"--lr_scheduler_type cosine with --optim schedule_free_adamw: schedule-free AdamW replaces"),
    # break test 2026-12-04: trained, then ZeroDivisionError at the first optimizer.eval() (1 - 1 / beta1)
    (["--optim", "schedule_free_adamw", "--adam_beta1", "0"],
     r"--adam_beta1 0 with --optim schedule_free_adamw: .* give a value in \(0, 1\)"),
])
def test_bad_optimizer_flags_are_refused_before_training(flags, message):
    with pytest.raises(ValueError, match=message):
        check_optimizer_args(parse(*flags))


def test_max_grad_norm_is_a_non_negative_number_and_zero_measures_only():
    with pytest.raises(SystemExit):
        parse("--max_grad_norm", "-1")
    assert parse().max_grad_norm == 0.0
    # TrainingRun.max_grad_norm is what the scripts give accelerator.clip_grad_norm_: infinity for 0.
    assert TrainingRun.max_grad_norm.fget(SimpleNamespace(args=parse())) == math.inf
    assert TrainingRun.max_grad_norm.fget(SimpleNamespace(args=parse("--max_grad_norm", "0.5"))) == 0.5
    # the norm is computed to clip or to be logged, not otherwise (a pass over the gradients saved)
    assert not TrainingRun.measures_grad_norm.fget(SimpleNamespace(args=parse()))
    assert TrainingRun.measures_grad_norm.fget(SimpleNamespace(args=parse("--max_grad_norm", "0.5")))
    assert TrainingRun.measures_grad_norm.fget(SimpleNamespace(args=parse("--with_tracking")))


def test_schedule_free_has_no_schedule_and_logs_the_rate_its_warmup_uses():
    args = parse("--optim", "schedule_free_adamw", "--num_warmup_steps", "3", "--learning_rate", "1e-2",
                 "--weight_decay", "0.1")
    check_optimizer_args(args)
    model = torch.nn.Linear(4, 2)
    optimizer = build_optimizer(model, args.learning_rate, args.weight_decay, **optimizer_options(args))
    assert isinstance(optimizer, schedulefree.AdamWScheduleFree) and is_schedule_free(optimizer)
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.1, 0.0]  # weight decayed, bias not
    accelerator = SimpleNamespace(num_processes=2, split_batches=False)
    scheduler = build_lr_scheduler(optimizer, args.lr_scheduler_type, 3, 100, accelerator)
    optimizer.train()
    for _ in range(6):
        expected = current_learning_rate(optimizer)  # read before the step, as TrainingRun does
        model(torch.randn(3, 4)).sum().backward()
        optimizer.step()
        scheduler.step()
        scheduler.step()  # an AcceleratedScheduler steps num_processes times: still no schedule
        optimizer.zero_grad()
        assert optimizer.param_groups[0]["scheduled_lr"] == pytest.approx(expected)  # the rate the step used
        assert optimizer.param_groups[0]["lr"] == 1e-2
    assert [round(current_learning_rate(optimizer) / 1e-2, 6)] == [1.0]


def test_schedule_free_eval_mode_gives_the_averaged_weights_and_train_mode_takes_them_back():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = build_optimizer(model, 1e-1, 0.0, optim="schedule_free_adamw")
    optimizer.train()
    for _ in range(5):
        model(torch.randn(8, 4)).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    trained = model.weight.detach().clone()
    optimizer.eval()
    averaged = model.weight.detach().clone()
    assert not torch.allclose(trained, averaged)  # evaluation sees x, not the gradient point y
    optimizer.train()
    assert torch.allclose(model.weight, trained, atol=1e-6)


def test_adam_epsilon_zero_is_refused_at_parsing():
    """Break test 2026-12-04: --adam_epsilon 0 trained and saved an all-NaN model, exit 0."""
    with pytest.raises(SystemExit):
        parse("--adam_epsilon", "0")
    assert parse("--adam_epsilon", "1e-6").adam_epsilon == 1e-6


@pytest.mark.parametrize("metric, greater", [
    ("accuracy", True), ("map", True), ("loss", False), ("perplexity", False), ("wer", False),
    ("eval_l2r_middle_perplexity", False), ("baseline_loss", False),
    # names that hold "wer" or "cer" inside a word (break test 2026-12-04: all were taken as lower-is-better)
    ("map_flower", True), ("map_tower", True), ("map_soccer_ball", True), ("map_dancer", True),
    ("accuracy_answerable", True),
])
def test_greater_is_better_default_reads_whole_words_of_the_metric_name(metric, greater):
    run = SimpleNamespace(args=parse("--metric_for_best_model", metric), main_metric=None)
    run.metric_name = lambda: TrainingRun.metric_name(run)
    assert TrainingRun.greater_is_better(run) is greater


@pytest.mark.parametrize("flags, zero_stage, message", [
    (["--optim", "schedule_free_adamw"], 2, r"--optim schedule_free_adamw under DeepSpeed: the engine wraps"),
    (["--load_best_model_at_end"], 3, r"--load_best_model_at_end under DeepSpeed ZeRO-3: the parameters are "),
])
def test_flags_deepspeed_cannot_honour_are_refused_before_training(flags, zero_stage, message):
    """Break test 2026-12-04: under DeepSpeed, schedule-free's eval() never reached the model, and ZeRO-3 restored
    only part of best/ while reporting best_model_loaded: true."""
    from common.run import refuse_under_deepspeed

    accelerator = SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=SimpleNamespace(zero_stage=zero_stage)))
    with pytest.raises(ValueError, match=message):
        refuse_under_deepspeed(parse(*flags), accelerator)
    refuse_under_deepspeed(parse("--load_best_model_at_end"), SimpleNamespace(  # ZeRO-2 loads best/ whole
        state=SimpleNamespace(deepspeed_plugin=SimpleNamespace(zero_stage=2))))

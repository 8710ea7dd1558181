"""Issue 36: `--auto_find_batch_size` (common/batch_size.py, every script's `main`): on the CPU allocator's real
out-of-memory error the per-device batch is halved and training starts again; `--keep_effective_batch_size` raises
the gradient accumulation to keep batch x accumulation; other errors are not retried; a resume starts from the batch
size its checkpoint recorded. The training function here allocates, for batch sizes that "do not fit", more bytes
than any address space holds, so torch's DefaultCPUAllocator really refuses (no error is faked)."""

import argparse
import json

import pytest
import torch
from accelerate import PartialState

from common.args import add_common_args, validate_common_args
from common.batch_size import train_with_batch_size_search
from common.checkpointing import PROGRESS_FILE


def parse(tmp_path, *flags):
    parser = argparse.ArgumentParser()
    add_common_args(parser, file_extensions=("csv",))
    return parser.parse_args(["--output_dir", str(tmp_path / "out"), *flags])


def trainer(fits_up_to, tried):
    def training_function(args):
        tried.append((args.per_device_train_batch_size, args.gradient_accumulation_steps))
        if args.per_device_train_batch_size > fits_up_to:
            torch.empty(1 << 62, dtype=torch.uint8)  # 4 EiB: "DefaultCPUAllocator: can't allocate memory"
        return {"per_device_train_batch_size": args.per_device_train_batch_size}
    return training_function


@pytest.mark.parametrize("keep, expected", [
    (True, [(16, 2), (8, 4), (4, 8)]),  # effective batch 32 kept
    (False, [(16, 2), (8, 2), (4, 2)]),
])
def test_halves_on_cpu_out_of_memory_until_it_fits(tmp_path, keep, expected):
    PartialState()  # the scripts' Accelerator has made it by the time a batch fails
    args = parse(tmp_path, "--per_device_train_batch_size", "16", "--gradient_accumulation_steps", "2",
                 "--auto_find_batch_size", *(["--keep_effective_batch_size"] if keep else []))
    tried = []
    assert train_with_batch_size_search(trainer(4, tried), args) == {"per_device_train_batch_size": 4}
    assert tried == expected
    assert args.auto_find_batch_size_requested == 16


def test_without_the_flag_an_out_of_memory_error_stops_the_run(tmp_path):
    args = parse(tmp_path, "--per_device_train_batch_size", "16")
    with pytest.raises(RuntimeError, match="DefaultCPUAllocator: can't allocate memory"):
        train_with_batch_size_search(trainer(4, []), args)


def test_other_errors_are_not_retried(tmp_path):
    PartialState()
    args = parse(tmp_path, "--per_device_train_batch_size", "16", "--auto_find_batch_size")
    tried = []

    def training_function(args):
        tried.append(args.per_device_train_batch_size)
        raise ValueError("--train_file x.csv, row 3: empty label")

    with pytest.raises(ValueError, match="row 3"):
        train_with_batch_size_search(training_function, args)
    assert tried == [16]


def test_a_resume_starts_from_the_batch_size_its_checkpoint_recorded(tmp_path):
    PartialState()
    checkpoint = tmp_path / "out" / "step_4"
    checkpoint.mkdir(parents=True)
    (checkpoint / PROGRESS_FILE).write_text(json.dumps({"completed_steps": 4, "run_settings": {
        "per_device_train_batch_size": 4, "gradient_accumulation_steps": 8}}))
    args = parse(tmp_path, "--per_device_train_batch_size", "16", "--gradient_accumulation_steps", "2",
                 "--auto_find_batch_size", "--keep_effective_batch_size", "--resume_from_checkpoint", "latest")
    tried = []
    train_with_batch_size_search(trainer(4, tried), args)
    assert tried == [(4, 8)]


def test_keep_effective_batch_size_needs_auto_find_batch_size(tmp_path):
    args = parse(tmp_path, "--keep_effective_batch_size", "--train_file", "x.csv")
    with pytest.raises(ValueError, match="--keep_effective_batch_size only applies with --auto_find_batch_size"):
        validate_common_args(args)

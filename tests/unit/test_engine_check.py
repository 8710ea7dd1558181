"""`common.launch.check_engine`: a launch that asked for FSDP / DeepSpeed / Megatron-LM but got another accelerator
state stops with an error naming both and how to launch instead (issue 17, item 2).

The accelerator is a stand-in carrying only what the check reads (`distributed_type`, `device`): the state
combinations come from accelerate itself (`DistributedType`), and the real launch (`accelerate launch --use_fsdp`
on CPU) is covered end to end in tests/examples/test_scale.py.
"""

from types import SimpleNamespace

import pytest
import torch
from accelerate.utils import DistributedType

from common.launch import check_engine, check_final_save, check_process_group, requested_engine


def state(distributed_type):
    return SimpleNamespace(distributed_type=distributed_type, device=torch.device("cpu"))


@pytest.mark.parametrize(
    "environ, expected",
    [
        ({}, (None, None)),
        ({"ACCELERATE_USE_FSDP": "true"}, ("FSDP", "ACCELERATE_USE_FSDP")),
        ({"ACCELERATE_USE_FSDP": "True"}, ("FSDP", "ACCELERATE_USE_FSDP")),  # accelerate lower-cases too
        ({"ACCELERATE_USE_FSDP": "false"}, (None, None)),
        ({"ACCELERATE_USE_DEEPSPEED": "true"}, ("DEEPSPEED", "ACCELERATE_USE_DEEPSPEED")),
        ({"ACCELERATE_USE_MEGATRON_LM": "true"}, ("MEGATRON_LM", "ACCELERATE_USE_MEGATRON_LM")),
    ],
)
def test_requested_engine_reads_accelerates_launch_variables(environ, expected):
    assert requested_engine(environ) == expected


@pytest.mark.parametrize(
    "environ, found",
    [
        ({}, DistributedType.NO),
        ({}, DistributedType.MULTI_CPU),
        ({"ACCELERATE_USE_FSDP": "true"}, DistributedType.FSDP),
        ({"ACCELERATE_USE_DEEPSPEED": "true"}, DistributedType.DEEPSPEED),
    ],
)
def test_the_engine_asked_for_or_none_passes(environ, found):
    check_engine(state(found), environ)


def test_fsdp_asked_on_cpu_but_ddp_found_names_both_and_the_command():
    environ = {"ACCELERATE_USE_FSDP": "true", "ACCELERATE_USE_CPU": "1"}
    with pytest.raises(RuntimeError) as error:
        check_engine(state(DistributedType.MULTI_CPU), environ)
    message = str(error.value)
    assert "asked for FSDP (ACCELERATE_USE_FSDP=true" in message
    assert "runs MULTI_CPU" in message
    assert "ACCELERATE_USE_CPU=1 is set" in message
    assert "--multi_gpu --num_processes N" in message and "configs/fsdp.yaml" in message


@pytest.mark.parametrize("found", [DistributedType.NO, DistributedType.MULTI_CPU, DistributedType.MULTI_GPU])
def test_deepspeed_asked_but_not_running_says_how_to_launch_it(found):
    with pytest.raises(RuntimeError, match=r"asked for DEEPSPEED .* runs " + found.value) as error:
        check_engine(state(found), {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_USE_CPU": "true"})
    assert "launch without ACCELERATE_USE_CPU" in str(error.value)


def group(num_processes):
    return SimpleNamespace(num_processes=num_processes, distributed_type=DistributedType.NO)


def test_a_node_started_alone_by_the_simple_launcher_is_refused():
    """`accelerate launch --num_machines 2 --machine_rank 1 ...` without --multi_gpu (measured with accelerate 1.15:
    one process, MASTER_ADDR/MASTER_PORT set, no WORLD_SIZE)."""
    environ = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29977", "ACCELERATE_MIXED_PRECISION": "no"}
    with pytest.raises(RuntimeError) as error:
        check_process_group(group(1), environ)
    message = str(error.value)
    assert "started this process alone" in message and "MASTER_ADDR=127.0.0.1" in message
    assert "--multi_gpu --num_machines M" in message and "configs/multi_node.yaml" in message


@pytest.mark.parametrize(
    "environ, num_processes",
    [
        ({}, 1),  # python examples/run_*.py
        ({"ACCELERATE_MIXED_PRECISION": "no"}, 1),  # accelerate launch --num_processes 1
        ({"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1"}, 1),  # a cluster's variables, not accelerate launch's
        ({"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "ACCELERATE_MIXED_PRECISION": "no"}, 2),  # one group
    ],
)
def test_one_process_or_one_group_passes(environ, num_processes):
    check_process_group(group(num_processes), environ)


def test_machines_that_did_not_join_are_refused():
    with pytest.raises(RuntimeError, match=r"started 2 processes \(WORLD_SIZE=2\) but they did not join"):
        check_process_group(group(1), {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"})


def deepspeed(zero_optimization):
    plugin = SimpleNamespace(deepspeed_config={"zero_optimization": zero_optimization})
    return SimpleNamespace(distributed_type=DistributedType.DEEPSPEED, state=SimpleNamespace(deepspeed_plugin=plugin))


def test_zero3_without_gathered_weights_is_refused_before_training():
    """accelerate's get_state_dict raises for it at the final save, i.e. after the whole training."""
    with pytest.raises(RuntimeError, match="stage3_gather_16bit_weights_on_model_save: true .found False"):
        check_final_save(deepspeed({"stage": 3, "stage3_gather_16bit_weights_on_model_save": False}))
    with pytest.raises(RuntimeError, match="zero3_save_16bit_model: true"):
        check_final_save(deepspeed({"stage": 3}))


@pytest.mark.parametrize("zero", [{"stage": 3, "stage3_gather_16bit_weights_on_model_save": True}, {"stage": 2}])
def test_zero3_gathering_and_zero2_pass(zero):
    check_final_save(deepspeed(zero))
    check_final_save(SimpleNamespace(distributed_type=DistributedType.MULTI_CPU))

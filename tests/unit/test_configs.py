"""Every file in configs/ loads with accelerate's own config loader and says what its name says."""

from pathlib import Path

import pytest
from accelerate.commands.config.config_args import load_config_from_file
from accelerate.utils import DistributedType

CONFIGS = Path(__file__).resolve().parents[2] / "configs"

EXPECTED = {
    "cpu_1proc.yaml": (DistributedType.NO, 1),
    "cpu_2proc.yaml": (DistributedType.MULTI_GPU, 2),  # + ACCELERATE_USE_CPU=1: a real 2-process gloo group
    "multi_gpu.yaml": (DistributedType.MULTI_GPU, 8),
    "multi_node.yaml": (DistributedType.MULTI_GPU, 16),
    "fsdp.yaml": (DistributedType.FSDP, 8),
    "deepspeed_zero2.yaml": (DistributedType.DEEPSPEED, 8),
    "deepspeed_zero2_offload.yaml": (DistributedType.DEEPSPEED, 8),
    "deepspeed_zero3.yaml": (DistributedType.DEEPSPEED, 8),
    "deepspeed_zero3_offload.yaml": (DistributedType.DEEPSPEED, 8),
}


def test_every_config_is_listed():
    assert sorted(p.name for p in CONFIGS.glob("*.yaml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_config_loads(name):
    config = load_config_from_file(str(CONFIGS / name))
    distributed_type, num_processes = EXPECTED[name]
    assert config.distributed_type == distributed_type
    assert config.num_processes == num_processes
    text = (CONFIGS / name).read_text()
    assert text.startswith("#"), "each config starts with a comment saying when to use it"
    if name.startswith("deepspeed"):
        assert config.deepspeed_config["zero_stage"] == int(name[len("deepspeed_zero")])
        offload = config.deepspeed_config["offload_optimizer_device"]
        assert offload == ("cpu" if "offload" in name else "none")
    if name == "fsdp.yaml":
        assert config.fsdp_config["fsdp_version"] == 2
    if name == "multi_node.yaml":
        assert config.num_machines == 2

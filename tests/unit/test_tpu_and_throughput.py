from types import SimpleNamespace

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType
from transformers import GPT2Config, GPT2LMHeadModel

from common.throughput import count_tokens, throughput_metrics
from common.tpu import tie_weights_on_xla


def untied_gpt2():
    model = GPT2LMHeadModel(GPT2Config(vocab_size=40, n_positions=16, n_embd=8, n_layer=1, n_head=2))
    assert model.lm_head.weight is model.transformer.wte.weight
    # What moving parameters to an XLA device does: every parameter becomes its own copy.
    model.lm_head.weight = torch.nn.Parameter(model.transformer.wte.weight.detach().clone())
    assert model.lm_head.weight is not model.transformer.wte.weight
    return model


def test_tie_weights_on_xla_reties():
    model = untied_gpt2()
    # The distributed type is faked: this machine has no TPU.
    accelerator = SimpleNamespace(distributed_type=DistributedType.XLA, unwrap_model=lambda m: m)
    assert tie_weights_on_xla(model, accelerator) is True
    assert model.lm_head.weight is model.transformer.wte.weight


def test_tie_weights_elsewhere_is_a_no_op():
    model = untied_gpt2()
    for distributed_type in (DistributedType.NO, DistributedType.MULTI_CPU, DistributedType.MULTI_GPU):
        accelerator = SimpleNamespace(distributed_type=distributed_type, unwrap_model=lambda m: m)
        assert tie_weights_on_xla(model, accelerator) is False
    assert model.lm_head.weight is not model.transformer.wte.weight


def test_count_tokens():
    batch = {"input_ids": torch.zeros(2, 4), "attention_mask": torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])}
    assert count_tokens(batch) == (5, 3)
    assert count_tokens({"pixel_values": torch.zeros(2, 3, 4, 4)}) == (0, 0)


def test_throughput_metrics_single_process():
    metrics = throughput_metrics(Accelerator(cpu=True), num_samples=100, num_tokens=3000, num_padding=1000, seconds=4)
    assert metrics == {
        "train_runtime": 4,
        "train_samples": 100,
        "train_samples_per_second": 25.0,
        "train_tokens_per_second": 750.0,
        "train_padding_fraction": 0.25,
    }

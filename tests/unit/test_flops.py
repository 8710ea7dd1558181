"""Unit tests of benchmarks/flops.py (6ND training FLOPs, MFU, the GPU peak table) and of --optim in
build_optimizer."""

import sys
from pathlib import Path

import pytest
import torch

from common.optimization import build_optimizer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # flops.py is a benchmarks/ module
from flops import (  # noqa: E402
    gpu_bf16_peak,
    matmul_parameters,
    matmul_peak_flops,
    model_flops_utilization,
    non_embedding_parameters,
    published_bf16_peak,
    training_flops,
    training_flops_per_token,
)


class TinyNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)  # 40 embedding parameters, not counted
        self.proj = torch.nn.Linear(4, 3)  # 4 x 3 + 3 = 15
        self.norm = torch.nn.LayerNorm(3)  # 3 + 3 = 6


def test_non_embedding_parameters_by_hand():
    assert non_embedding_parameters(TinyNet()) == 15 + 6


def test_training_flops_and_mfu_by_hand():
    # N = 21 parameters, D = 1000 tokens: C = 6 x 21 x 1000 = 126,000 FLOPs.
    flops = training_flops(21, 1000)
    assert flops == 126_000
    # Done in 0.5 s: 252,000 FLOP/s; against a 1,008,000 FLOP/s peak that is 25 %.
    assert model_flops_utilization(flops / 0.5, 1_008_000) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="peak_flops_per_second"):
        model_flops_utilization(1.0, 0.0)


def test_matches_transformers_trainer_floating_point_ops():
    """transformers' own estimate (`Trainer.floating_point_ops`, the `total_flos` it reports) is
    6 x tokens x non-embedding parameters, padding included."""
    from types import SimpleNamespace

    from transformers import BertConfig, BertForSequenceClassification, Trainer

    config = BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=16, max_position_embeddings=32)
    model = BertForSequenceClassification(config)
    # Hand count for one layer, hidden 8, intermediate 16, 2 labels (embeddings left out):
    # embedding LayerNorm 16; attention q,k,v,o 4 x (64 + 8) = 288, its LayerNorm 16; FFN 8x16+16 +
    # 16x8+8 = 280, its LayerNorm 16; pooler 64 + 8 = 72; classifier 8 x 2 + 2 = 18.
    assert non_embedding_parameters(model) == 16 + 288 + 16 + 280 + 16 + 72 + 18
    batch = {"input_ids": torch.ones(3, 7, dtype=torch.long)}
    # Called unbound: the method only reads `self.model`.
    assert training_flops(non_embedding_parameters(model), 3 * 7) == Trainer.floating_point_ops(
        SimpleNamespace(model=model), batch
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matmul_peak_is_a_positive_rate(dtype):
    # A small matrix only: the value is machine-dependent, so nothing about its size is asserted.
    assert matmul_peak_flops(dtype, size=64, repeats=1, iterations=1) > 0


@pytest.mark.parametrize("optim", ["adamw_torch", "adamw_torch_foreach", "adamw_torch_fused"])
def test_optim_choices_give_the_same_update(optim):
    torch.manual_seed(0)
    reference, model = TinyNet(), TinyNet()
    model.load_state_dict(reference.state_dict())
    results = []
    for net, name in ((reference, "adamw_torch"), (model, optim)):
        optimizer = build_optimizer(net, learning_rate=1e-2, weight_decay=0.1, optim=name)
        for step in range(3):
            loss = net.norm(net.proj(net.embed(torch.tensor([1, 2, step])))).pow(2).sum()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        results.append(torch.cat([p.detach().flatten() for p in net.parameters()]))
    assert torch.allclose(results[0], results[1], atol=1e-6)
    expected = {"adamw_torch_foreach": "foreach", "adamw_torch_fused": "fused"}.get(optim)
    if expected:
        assert optimizer.defaults[expected] is True


def test_unknown_optim_is_refused():
    with pytest.raises(ValueError, match="--optim sgd"):
        build_optimizer(TinyNet(), 1e-3, 0.0, optim="sgd")


@pytest.mark.parametrize("name, tflops", [
    ("NVIDIA H100 80GB HBM3", 989.4),  # the SXM board's name
    ("NVIDIA H100 PCIe", 756.5),
    ("NVIDIA H100 NVL", 835.5),
    ("NVIDIA H200", 989.4),
    ("NVIDIA H200 NVL", 835.5),
    ("NVIDIA GH200 480GB", 989.4),
    ("NVIDIA A100-SXM4-80GB", 312.0),
    ("NVIDIA A100 80GB PCIe", 312.0),
    ("NVIDIA A10", 125.0),
    ("NVIDIA L4", 121.0),
    ("NVIDIA L40S", 362.05),
    ("NVIDIA L40", 181.05),
    ("NVIDIA GeForce RTX 4090", 165.2),
    ("nvidia geforce rtx 3090", 71.0),  # case does not matter
])
def test_published_bf16_peak_by_device_name(name, tflops):
    peak, source = published_bf16_peak(name)
    assert peak == pytest.approx(tflops * 1e12) and "NVIDIA" in source


@pytest.mark.parametrize("name", ["NVIDIA A10G", "Tesla V100-SXM2-16GB", "NVIDIA GeForce RTX 4090 D",
                                  "NVIDIA GeForce RTX 3090 Ti", "Intel(R) Xeon(R) Processor @ 2.00GHz", "", None])
def test_unknown_device_names_fall_back_to_the_measured_matmul(name):
    """A10G (no NVIDIA datasheet rate), V100 (no native bf16), cut-down or faster variants of a listed board, a CPU:
    not in the table, so the measured matmul is used, and only then measured."""
    assert published_bf16_peak(name) is None
    peak, source = gpu_bf16_peak(name, measure=lambda: 2.5e12)
    assert peak == 2.5e12 and source.startswith("measured")
    with pytest.raises(ValueError, match="must be > 0"):
        gpu_bf16_peak(name, measure=lambda: 0.0)
    calls = []
    assert gpu_bf16_peak("NVIDIA H100 80GB HBM3", measure=lambda: calls.append(1))[0] == pytest.approx(989.4e12)
    assert calls == []  # a listed GPU is not measured


@pytest.mark.parametrize("tied", [True, False])
def test_matmul_parameters_add_back_a_tied_output_projection(tied):
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(vocab_size=100, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied)
    with torch.device("meta"):  # counting needs no memory
        model = AutoModelForCausalLM.from_config(config)
    # Per layer by hand: q 16x16 + k,v 16x8 each + o 16x16 = 768; MLP 3 x 16x32 = 1536; two RMSNorms 2 x 16: 2336.
    # Two layers + final norm 16 = 4688; the output projection is 100 x 16 = 1600 either way (tied or its own).
    assert non_embedding_parameters(model) == 4688 + (0 if tied else 1600)
    assert matmul_parameters(model) == 4688 + 1600
    assert matmul_parameters(TinyNet()) == non_embedding_parameters(TinyNet())  # no output embedding at all


def test_training_flops_per_token_by_hand():
    # 6 x 1000 + 12 x 2 layers x 16 wide x 8 tokens of context = 6000 + 3072.
    assert training_flops_per_token(1000, num_layers=2, hidden_size=16, context=8) == 9072
    assert training_flops_per_token(1000) == training_flops(1000, 1)  # without the attention term: 6N

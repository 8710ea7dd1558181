"""Unit tests of benchmarks/flops.py (6ND training FLOPs, MFU) and of --optim in build_optimizer."""

import sys
from pathlib import Path

import pytest
import torch

from common.optimization import build_optimizer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # flops.py is a benchmarks/ module
from flops import (  # noqa: E402
    matmul_peak_flops,
    model_flops_utilization,
    non_embedding_parameters,
    training_flops,
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

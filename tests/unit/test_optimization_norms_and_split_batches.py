"""Two promises of common/optimization.py that tests/unit/test_optimization.py does not reach (issue 21):

* `build_optimizer` puts *every* normalisation weight in the no-decay group — RMSNorm (Llama) and BatchNorm
  (ResNet, plain torch), not only BERT's LayerNorm — and AdamW then really leaves them undecayed;
* `build_lr_scheduler` sizes the schedule for `split_batches=True`, where accelerate's `AcceleratedScheduler`
  steps the wrapped scheduler once per optimizer step whatever the number of processes.
"""

from types import SimpleNamespace

import pytest
import torch
from accelerate.scheduler import AcceleratedScheduler
from transformers import LlamaConfig, LlamaForCausalLM, ResNetConfig, ResNetForImageClassification

from common.optimization import build_lr_scheduler, build_optimizer


def group_names(model, optimizer):
    """(names in the weight-decay group, names in the no-decay group), checking the groups' decay values."""
    decay, no_decay = optimizer.param_groups
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)] for p in decay["params"]}, {names[id(p)] for p in no_decay["params"]}


def test_llama_rmsnorm_weights_get_no_weight_decay():
    model = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1))
    decay, no_decay = group_names(model, build_optimizer(model, learning_rate=1e-3, weight_decay=0.01))
    # LlamaRMSNorm: the two per-layer norms and the final one; Llama has no biases.
    assert no_decay == {"model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight",
                        "model.norm.weight"}
    layer = "model.layers.0."
    assert decay == {"model.embed_tokens.weight", "lm_head.weight"} | {
        layer + f"self_attn.{p}_proj.weight" for p in "qkvo"} | {layer + f"mlp.{p}_proj.weight" for p in
                                                                   ("gate", "up", "down")}


def test_resnet_batchnorm_weights_and_biases_get_no_weight_decay():
    model = ResNetForImageClassification(ResNetConfig(num_channels=1, embedding_size=4, hidden_sizes=[4], depths=[1],
                                                      layer_type="basic", num_labels=3))
    decay, no_decay = group_names(model, build_optimizer(model, learning_rate=1e-3, weight_decay=0.01))
    stage = "resnet.encoder.stages.0.layers.0.layer."
    assert decay == {"resnet.embedder.embedder.convolution.weight", stage + "0.convolution.weight",
                     stage + "1.convolution.weight", "classifier.1.weight"}
    assert no_decay == {"classifier.1.bias"} | {
        f"{prefix}normalization.{p}" for prefix in ("resnet.embedder.embedder.", stage + "0.", stage + "1.")
        for p in ("weight", "bias")}


def test_adamw_decays_only_the_decay_group():
    """One AdamW step with zero gradients changes a parameter only through decoupled weight decay
    (Loshchilov & Hutter, 2019): p <- p * (1 - lr * weight_decay) = p * (1 - 0.1 * 0.5) = 0.95 p in the decay
    group, p unchanged in the other (Adam's own update is 0 / (sqrt(0) + eps) = 0)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3, bias=False), torch.nn.BatchNorm2d(2), torch.nn.Flatten(),
                                torch.nn.Linear(8, 3))
    with torch.no_grad():
        model[1].weight.fill_(2.0)
        model[1].bias.fill_(-1.0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = build_optimizer(model, learning_rate=0.1, weight_decay=0.5)
    for param in model.parameters():
        param.grad = torch.zeros_like(param)
    optimizer.step()
    after = dict(model.named_parameters())
    for name in ("0.weight", "3.weight"):  # conv and linear weights: decayed
        torch.testing.assert_close(after[name].detach(), before[name] * 0.95)
    for name in ("1.weight", "1.bias", "3.bias"):  # BatchNorm2d weight and bias, Linear bias: untouched
        assert torch.equal(after[name].detach(), before[name]), name
    assert torch.equal(after["1.weight"].detach(), torch.full((2,), 2.0))


@pytest.mark.parametrize("scheduler_type,expected", [
    # linear, warmup 5, end 20: lr(k) = peak * k / 5 for k <= 5, then peak * (20 - k) / 15.
    ("linear", {1: 0.2, 3: 0.6, 5: 1.0, 11: 0.6, 19: 1 / 15, 20: 0.0}),
    # cosine: peak * (1 + cos(pi * (k - 5) / 15)) / 2 after warmup: k = 10 -> 0.75, k = 15 -> 0.25.
    ("cosine", {5: 1.0, 10: 0.75, 15: 0.25, 20: 0.0}),
])
def test_scheduler_with_split_batches_on_two_processes(scheduler_type, expected):
    """With `split_batches=True` accelerate steps the wrapped scheduler once per optimizer step (not
    num_processes times), so the schedule must not be stretched by num_processes = 2: warmup ends after
    exactly 5 optimizer steps and the learning rate reaches its end after exactly 20."""
    peak = 1e-3
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([param], lr=peak)
    # A stand-in for the Accelerator (not the unit under test): the two attributes build_lr_scheduler reads.
    accelerator = SimpleNamespace(num_processes=2, split_batches=True)
    scheduler = build_lr_scheduler(optimizer, scheduler_type, 5, 20, accelerator)
    # accelerate's own wrapper, as `accelerator.prepare` returns it with split_batches=True (its
    # num_processes-fold stepping is the other branch; test_optimization.py replays that one).
    prepared = AcceleratedScheduler(scheduler, [], split_batches=True)
    lrs = {}
    for step in range(1, 21):
        optimizer.step()
        prepared.step()
        lrs[step] = prepared.get_last_lr()[0]
    for step, fraction in expected.items():
        assert lrs[step] == pytest.approx(peak * fraction, abs=1e-12), (step, lrs[step])

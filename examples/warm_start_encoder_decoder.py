"""Writes a BERT2BERT checkpoint: an `EncoderDecoderModel` whose encoder and decoder both start from a BERT-style
encoder checkpoint (Rothe, Narayan and Severyn 2020, "Leveraging Pre-trained Checkpoints for Sequence Generation
Tasks", TACL; transformers' `EncoderDecoderModel.from_encoder_decoder_pretrained`), so that `run_summarization.py`
and `run_translation.py` fine-tune it through `--model_name_or_path` as any seq2seq checkpoint.

    python examples/warm_start_encoder_decoder.py --encoder "$MINILM" --output_dir outputs/bert2bert-minilm

The decoder is the same BERT with `is_decoder=True` (causal self-attention) and new, randomly initialised
cross-attention layers; its LM head's transform is new and its output matrix is tied to the decoder's word
embeddings. Encoder and decoder keep separate copies of the weights (the paper's BERT2BERT; its BERTShare variant,
one shared copy, needs `tie_encoder_decoder`, which transformers 5's `EncoderDecoderModel` no longer applies). The
token ids follow the paper's and transformers' recipe for BERT tokenizers: the decoder starts
from [CLS], ends at [SEP], pads with [PAD]; they go into config.json and generation_config.json, with the
tokenizer saved beside the model.

Why a helper rather than a flag of the training scripts: the warm-started model is an ordinary checkpoint
folder, so every seq2seq script, `from_pretrained` and a later `--resume_from_checkpoint` see one thing, and the
scripts keep one model-loading path.
"""

import argparse
import os
import sys

from transformers import AutoConfig, AutoTokenizer, EncoderDecoderModel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common.args import add_helper_output_args, check_helper_output_dir  # noqa: E402


def warm_start(encoder, decoder=None):
    """Builds the `EncoderDecoderModel` and returns (model, tokenizer of `encoder`).

    Raises:
        ValueError: naming the flag when a checkpoint is not an encoder with a decoder form (BERT, RoBERTa,
            ELECTRA, ... i.e. its config type has a causal-LM class), or when the tokenizer lacks [CLS], [SEP] or
            [PAD].
    """
    decoder = decoder or encoder
    vocab_sizes = {}
    for flag, path in (("--encoder", encoder), ("--decoder", decoder)):
        try:
            config = AutoConfig.from_pretrained(path)
        except (OSError, ValueError, KeyError) as error:
            reason = f"{type(error).__name__}: {str(error).splitlines()[0]}"
            raise ValueError(f"{flag} {path}: not a transformers checkpoint folder (or reachable Hub id) with a "
                             f"config.json that loads ({reason})") from None
        if config.is_encoder_decoder or not hasattr(config, "add_cross_attention"):
            raise ValueError(f"{flag} {path}: model type {config.model_type!r} cannot be warm-started as a "
                             "BERT2BERT half; expected an encoder checkpoint such as bert, roberta or electra")
        vocab_sizes[flag] = config.vocab_size
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    missing = [name for name in ("cls_token_id", "sep_token_id", "pad_token_id") if getattr(tokenizer, name) is None]
    if missing:
        raise ValueError(f"--encoder {encoder}: its tokenizer has no {missing} (BERT-style [CLS]/[SEP]/[PAD])")
    for flag, size in vocab_sizes.items():  # one tokenizer (the encoder's) feeds both halves
        if size != len(tokenizer):
            raise ValueError(f"{flag} {encoder if flag == '--encoder' else decoder}: a vocabulary of {size} "
                             f"tokens, but the tokenizer of --encoder {encoder} has {len(tokenizer)} (missing or "
                             "another tokenizer?); both halves must share the encoder's tokenizer")
    model = EncoderDecoderModel.from_encoder_decoder_pretrained(encoder, decoder)
    for config in (model.config, model.generation_config):
        config.decoder_start_token_id = tokenizer.cls_token_id
        config.bos_token_id = tokenizer.cls_token_id
        config.eos_token_id = tokenizer.sep_token_id
        config.pad_token_id = tokenizer.pad_token_id
    model.config.vocab_size = model.config.decoder.vocab_size
    return model, tokenizer


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoder", required=True, help="Encoder checkpoint (folder or Hub id), e.g. MiniLM-L6.")
    parser.add_argument("--decoder", default=None, help="Decoder checkpoint (default: --encoder's).")
    add_helper_output_args(parser)
    args = parser.parse_args(argv)
    check_helper_output_dir(parser, args.output_dir, args.overwrite_output_dir)
    try:
        model, tokenizer = warm_start(args.encoder, args.decoder)
    except ValueError as error:
        parser.error(str(error))
    model.save_pretrained(args.output_dir)
    tokenizer.save_pretrained(args.output_dir)
    print(f"wrote {args.output_dir} ({sum(p.numel() for p in model.parameters()):,} parameters)")
    return model


if __name__ == "__main__":
    main()

"""Train a GPT-2-style byte-level BPE tokenizer on your own text, for training a model from scratch
with `run_clm.py --model_type gpt2 --tokenizer_name <this output>`.

Byte-level BPE (Radford et al., 2019, "Language Models are Unsupervised Multitask Learners",
section 2.2) starts from the 256 byte values, so every string, whatever its characters, has an
encoding and no unknown token is ever needed; merges are then learned from the training text. The
result is saved as a `GPT2TokenizerFast` (loadable with `AutoTokenizer.from_pretrained`) with one
special token, `<|endoftext|>`, used as BOS, EOS and UNK, and, like GPT-2, no padding token.

    python examples/train_tokenizer.py --train_file ../shared/data/tinyshakespeare/input.txt \\
        --vocab_size 2048 --output_dir outputs/shakespeare_tokenizer
"""

import argparse
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import GPT2TokenizerFast

from common.args import positive_int
from common.data import load_data_files

END_OF_TEXT = "<|endoftext|>"


def train_byte_level_bpe(texts, vocab_size, model_max_length=1024, min_frequency=2, output_dir=None):
    """Trains a byte-level BPE tokenizer (GPT-2's scheme) on `texts`.

    Args:
        texts: an iterable of strings (for a text file: its lines, line breaks included if they
            should become tokens).
        vocab_size: the target vocabulary size, special token and the 256 byte symbols included;
            must be > 257. Fewer merges are learned when the text has too few distinct pairs.
        model_max_length: the longest sequence (in tokens) the tokenizer reports as allowed;
            `run_clm.py` caps `--block_size` by it.
        min_frequency: a pair must occur at least this often to be merged.
        output_dir: when given, the tokenizer is saved there with `save_pretrained`.

    Returns:
        `transformers.GPT2TokenizerFast` with bos/eos/unk = `<|endoftext|>` (id 0) and no pad token.

    Raises:
        ValueError: when vocab_size <= 257 (no room for a single merge).
    """
    if vocab_size <= 257:
        raise ValueError(f"--vocab_size {vocab_size}: must exceed 257 (256 byte symbols + {END_OF_TEXT}).")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[END_OF_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    fast = GPT2TokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=END_OF_TEXT,
        eos_token=END_OF_TEXT,
        unk_token=END_OF_TEXT,
        model_max_length=model_max_length,
    )
    if output_dir is not None:
        fast.save_pretrained(output_dir)
    return fast


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--train_file", type=str, required=True, help="Text to learn from (.txt, .csv, .json, .jsonl)."
    )
    parser.add_argument(
        "--text_column_name", type=str, default="text", help="Text column of a .csv/.json/.jsonl file (default: text)."
    )
    parser.add_argument("--vocab_size", type=positive_int, default=8192, help="Vocabulary size (> 257).")
    parser.add_argument("--min_frequency", type=positive_int, default=2, help="Minimum count of a merged pair.")
    parser.add_argument(
        "--model_max_length", type=positive_int, default=1024, help="Longest sequence the tokenizer allows."
    )
    parser.add_argument("--output_dir", type=str, required=True, help="Where to save the tokenizer.")
    return parser.parse_args(argv)


def main(argv=None):
    """Trains the tokenizer on --train_file (a .txt file keeps its line breaks, as `run_clm.py`
    does by default) and saves it to --output_dir. Returns the tokenizer."""
    args = parse_args(argv)
    extension = Path(args.train_file).suffix.lstrip(".").lower()
    kwargs = {"keep_linebreaks": True} if extension == "txt" else {}
    dataset = load_data_files({"train": args.train_file}, **kwargs)["train"]
    if args.text_column_name not in dataset.column_names:
        raise ValueError(
            f"--train_file {args.train_file}: no column '{args.text_column_name}' (pass --text_column_name); "
            f"columns present: {dataset.column_names}."
        )
    texts = (text for text in dataset[args.text_column_name] if text)
    tokenizer = train_byte_level_bpe(
        texts, args.vocab_size, args.model_max_length, args.min_frequency, args.output_dir
    )
    print(f"Saved a byte-level BPE tokenizer with {len(tokenizer)} tokens to {args.output_dir}")
    return tokenizer


if __name__ == "__main__":
    main()

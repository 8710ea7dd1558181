"""examples/warm_start_encoder_decoder.py on a tiny BERT: which weights are copied, which are new, the token ids
of the decoder, and its refusals."""

import pytest
import torch
import warm_start_encoder_decoder as warm
from transformers import AutoModelForSeq2SeqLM, BertModel

from conftest import build_tiny_bert

TEXTS = ["the cat sat on the mat.", "a dog ran in the park.", "birds sing at dawn."] * 20


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    return build_tiny_bert(tmp_path_factory.mktemp("tiny_bert"), TEXTS)


def test_encoder_and_decoder_start_from_the_checkpoint(tiny_bert, tmp_path):
    bert = BertModel.from_pretrained(tiny_bert)
    warm.main(["--encoder", str(tiny_bert), "--output_dir", str(tmp_path)])
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
    assert type(model).__name__ == "EncoderDecoderModel"
    source = bert.state_dict()
    encoder, decoder = model.encoder.state_dict(), model.decoder.bert.state_dict()
    for name in ("embeddings.word_embeddings.weight", "encoder.layer.1.attention.self.query.weight",
                 "encoder.layer.0.output.dense.weight"):
        assert torch.equal(encoder[name], source[name]), name
        assert torch.equal(decoder[name], source[name]), name
    assert "encoder.layer.0.crossattention.self.query.weight" in decoder  # new: the encoder has none
    assert model.config.decoder.is_decoder and model.config.decoder.add_cross_attention
    # The LM head's output matrix is the decoder's word embeddings.
    assert model.decoder.cls.predictions.decoder.weight.data_ptr() == \
        model.decoder.bert.embeddings.word_embeddings.weight.data_ptr()
    # Not shared by default: training one half leaves the other.
    assert model.encoder.embeddings.word_embeddings.weight.data_ptr() != \
        model.decoder.bert.embeddings.word_embeddings.weight.data_ptr()
    tokenizer = warm.AutoTokenizer.from_pretrained(tmp_path)
    for config in (model.config, model.generation_config):
        assert (config.decoder_start_token_id, config.eos_token_id, config.pad_token_id) == (
            tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id) == (2, 3, 0)
    # Labels shift right behind [CLS]: the decoder's first input is its start token.
    labels = tokenizer(["the cat sat."], return_tensors="pt").input_ids
    shifted = model.prepare_decoder_input_ids_from_labels(labels=labels)
    assert shifted[0, 0].item() == 2 and torch.equal(shifted[0, 1:], labels[0, :-1])
    loss = model(input_ids=labels, labels=labels).loss
    assert torch.isfinite(loss) and loss.item() > 0


def test_refusals(tiny_bert, tmp_path, capsys):
    from transformers import BartConfig

    BartConfig(vocab_size=50, d_model=16, encoder_layers=1, decoder_layers=1).save_pretrained(tmp_path / "bart")
    with pytest.raises(ValueError, match=r"--decoder .*bart: model type 'bart' cannot be warm-started"):
        warm.warm_start(str(tiny_bert), str(tmp_path / "bart"))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(SystemExit):
        warm.main(["--encoder", str(tiny_bert), "--output_dir", str(tmp_path / "full")])
    assert "is not empty; pass --overwrite_output_dir" in capsys.readouterr().err


def test_refusals_found_by_the_break_test(tiny_bert, tmp_path, capsys):
    """A decoder whose vocabulary differs from the encoder's tokenizer (it crashed at the first forward pass), an
    encoder folder without its tokenizer (a 5-token tokenizer was saved), a missing folder, and an --output_dir
    that is a file (it printed 'wrote' and wrote nothing): each refused naming the flag, before any weights load."""
    import shutil

    from transformers import BertConfig, BertModel

    BertModel(BertConfig(vocab_size=500, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64)).save_pretrained(tmp_path / "other_vocab")
    (tmp_path / "no_tokenizer").mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_bert / name, tmp_path / "no_tokenizer" / name)
    (tmp_path / "a_file").write_text("x")
    cases = [
        (["--encoder", str(tiny_bert), "--decoder", str(tmp_path / "other_vocab")],
         "--decoder .*other_vocab: a vocabulary of 500 tokens, but the tokenizer of --encoder"),
        (["--encoder", str(tmp_path / "no_tokenizer")], "--encoder .*no_tokenizer: a vocabulary of"),
        (["--encoder", str(tmp_path / "missing")], "--encoder .*missing: not a transformers checkpoint folder"),
    ]
    import re

    for argv, message in cases:
        with pytest.raises(SystemExit):
            warm.main(argv + ["--output_dir", str(tmp_path / "out")])
        err = capsys.readouterr().err
        assert re.search(message, err), err
        assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit):
        warm.main(["--encoder", str(tiny_bert), "--output_dir", str(tmp_path / "a_file")])
    assert "a_file is a file; expected a folder" in capsys.readouterr().err

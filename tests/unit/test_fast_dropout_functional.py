"""--fast_dropout on dropout that a model's code applies with `torch.nn.functional.dropout` (Marian, BART, T5),
and the attention switch's rule (only where the config's attention dropout is above 0)."""

import torch
from test_fast_dropout import training_losses
from torch import nn
from transformers import BertConfig, BertModel, LlamaConfig, LlamaModel, MarianConfig, MarianMTModel

from common.fast_dropout import enable_fast_dropout, fast_dropout, fast_dropout_report, functional_fast_dropout

TORCH_DROPOUT = functional_fast_dropout.torch_dropout


class FunctionalDropoutBlock(nn.Module):
    """Model code in the style of transformers' Marian layers: dropout as a functional call, no nn.Dropout."""

    def __init__(self, p):
        super().__init__()
        self.linear = nn.Linear(64, 64)
        self.p = p

    def forward(self, x):
        return nn.functional.dropout(self.linear(x), p=self.p, training=self.training)


class Outer(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.block = FunctionalDropoutBlock(p)

    def forward(self, x):
        return self.block(x)


def test_functional_call_inside_the_model_is_fast_dropout_and_outside_is_torchs():
    torch.manual_seed(0)
    model = Outer(0.3)
    assert enable_fast_dropout(model) == (0, False)
    assert torch.nn.functional.dropout is functional_fast_dropout
    x = torch.randn(50, 64)
    torch.manual_seed(5)
    out = model(x)
    torch.manual_seed(5)
    expected = fast_dropout(model.block.linear(x), 0.3)
    assert torch.equal(out, expected)
    # Outside a forward of the switched model the same function is torch's, draw for draw.
    torch.manual_seed(5)
    outside = torch.nn.functional.dropout(x, 0.3)
    torch.manual_seed(5)
    assert torch.equal(outside, TORCH_DROPOUT(x, 0.3))
    # In evaluation the model computes what it did without dropout.
    model.eval()
    assert torch.equal(model(x), model.block.linear(x))


def test_a_call_after_an_exception_inside_the_model_is_torchs():
    model = Outer(0.3)
    enable_fast_dropout(model)
    try:
        model(torch.randn(3, 7))  # wrong width: the Linear raises
    except RuntimeError:
        pass
    x = torch.randn(50, 64)
    torch.manual_seed(2)
    after = torch.nn.functional.dropout(x, 0.3)
    torch.manual_seed(2)
    assert torch.equal(after, TORCH_DROPOUT(x, 0.3))


def test_inplace_calls_stay_torchs():
    class InPlace(nn.Module):
        def forward(self, x):
            return nn.functional.dropout(x, p=0.5, training=self.training, inplace=True)

    model = InPlace()
    enable_fast_dropout(model)
    x = torch.ones(1000)
    torch.manual_seed(4)
    out = model(x)
    assert out is x  # torch's in-place dropout returns its input
    torch.manual_seed(4)
    assert torch.equal(out, TORCH_DROPOUT(torch.ones(1000), 0.5))


def tiny_marian():
    return MarianMTModel(MarianConfig(
        vocab_size=60, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, dropout=0.3, attention_dropout=0.0,
        activation_dropout=0.0, max_position_embeddings=64, pad_token_id=59, decoder_start_token_id=59))


def test_marian_uses_fast_dropout_keeps_its_attention_and_trains():
    torch.manual_seed(0)
    model = tiny_marian()
    attention = model.config._attn_implementation
    input_ids = torch.randint(0, 59, (4, 10))
    labels = torch.randint(0, 59, (4, 8))
    model.eval()
    with torch.no_grad():
        before = model(input_ids=input_ids, labels=labels).logits
    reference = MarianMTModel(model.config)
    reference.load_state_dict(model.state_dict())
    replaced, switched = enable_fast_dropout(model)
    assert (replaced, switched) == (0, False)  # Marian has no nn.Dropout; attention dropout 0: sdpa stays
    assert model.config._attn_implementation == attention
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=input_ids, labels=labels).logits, before, rtol=0, atol=0)
    model.train()
    reference.train()
    torch.manual_seed(1)
    fast = model(input_ids=input_ids, labels=labels).loss
    torch.manual_seed(1)
    again = model(input_ids=input_ids, labels=labels).loss
    torch.manual_seed(1)
    with torch.no_grad():
        torchs = reference(input_ids=input_ids, labels=labels).loss
    assert torch.equal(fast, again)  # seeded
    assert not torch.equal(fast.detach(), torchs)  # other masks than torch's dropout draws
    losses = training_losses(model, 40, 3e-3, input_ids=input_ids, labels=labels)
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5


def test_attention_kept_where_the_config_has_no_attention_dropout():
    bert = BertModel(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                intermediate_size=64, attention_probs_dropout_prob=0.0))
    llama = LlamaModel(LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, attention_dropout=0.0,
                                   bos_token_id=0, eos_token_id=0))
    for model in (bert, llama):
        attention = model.config._attn_implementation
        assert enable_fast_dropout(model)[1] is False
        assert model.config._attn_implementation == attention


def test_torchscript_still_compiles_torchs_dropout_after_the_switch():
    enable_fast_dropout(Outer(0.3))
    assert torch.nn.functional.dropout is functional_fast_dropout
    scripted = torch.jit.script(nn.Dropout(0.1))  # an unrelated module, scripted after the replacement
    x = torch.randn(1000)
    torch.manual_seed(6)
    out = scripted(x)
    torch.manual_seed(6)
    assert torch.equal(out, TORCH_DROPOUT(x, 0.1))


def test_torch_compile_of_a_switched_model_runs_in_one_graph_with_torchs_dropout():
    model = Outer(0.3)
    enable_fast_dropout(model)
    compiled = torch.compile(model, backend="eager", fullgraph=True)  # fullgraph: a graph break raises
    x = torch.randn(50, 64)
    torch.manual_seed(7)
    out = compiled(x)
    torch.manual_seed(7)
    assert torch.equal(out, TORCH_DROPOUT(model.block.linear(x), 0.3))  # documented: compiled code keeps torch's


def test_a_model_that_only_logs_instead_of_switching_its_attention_reports_false():
    from transformers import BloomConfig, BloomModel

    model = BloomModel(BloomConfig(vocab_size=50, hidden_size=32, n_layer=1, n_head=4, attention_dropout=0.2))
    attention = model.config._attn_implementation
    assert enable_fast_dropout(model)[1] is False
    assert model.config._attn_implementation == attention


def test_the_report_says_what_was_replaced():
    bert = BertModel(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                intermediate_size=64))
    enable_fast_dropout(bert)
    assert fast_dropout_report() == {"fast_dropout_modules_replaced": 4, "fast_dropout_attention_switched": True,
                                     "fast_dropout_functional_calls": False}  # embeddings + 3 in the layer
    enable_fast_dropout(tiny_marian())
    assert fast_dropout_report() == {"fast_dropout_modules_replaced": 0, "fast_dropout_attention_switched": False,
                                     "fast_dropout_functional_calls": True}
    enable_fast_dropout(nn.Linear(2, 2))  # nothing to change: all zero, so all_results.json shows it
    assert fast_dropout_report() == {"fast_dropout_modules_replaced": 0, "fast_dropout_attention_switched": False,
                                     "fast_dropout_functional_calls": False}

"""--fast_dropout drops attention probabilities (common/fast_dropout.py, `eager_fast_dropout_attention`).

The models here have no dropout but the attention-probability dropout (BERT with hidden_dropout_prob=0; Llama,
whose only dropout is attention_dropout), so every effect checked comes from that one dropout: a version of
the attention that ignored its `dropout` (p forced to 0) fails each check (issue 21's mutant).
"""

import math

import pytest
import torch
from transformers import BertConfig, BertModel, LlamaConfig, LlamaModel

from common.fast_dropout import enable_fast_dropout

P = 0.25  # attention-probability dropout (not fast_dropout's default 0.5): kept probabilities are scaled by 4/3


def attention_dropout_only_model(name):
    """A tiny encoder/decoder whose only dropout is on the attention probabilities (p = P)."""
    if name == "bert":
        return BertModel(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                    intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                                    attention_probs_dropout_prob=P))
    return LlamaModel(LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, attention_dropout=P,
                                  bos_token_id=0, eos_token_id=0))


@pytest.mark.parametrize("name", ["bert", "llama"])
def test_attention_probabilities_are_dropped_with_p_and_rescaled(name):
    torch.manual_seed(0)
    model = attention_dropout_only_model(name)
    replaced, switched = enable_fast_dropout(model)
    assert switched
    input_ids = torch.randint(0, 50, (4, 16))
    model.eval()
    with torch.no_grad():
        evaluation = model(input_ids=input_ids, output_attentions=True)
    model.train()
    torch.manual_seed(1)
    with torch.no_grad():
        first = model(input_ids=input_ids, output_attentions=True)
        second = model(input_ids=input_ids, output_attentions=True)
    torch.manual_seed(1)
    with torch.no_grad():
        repeated = model(input_ids=input_ids, output_attentions=True)

    # Layer 0 sees the same input in both modes (no embedding dropout), so its training-mode attention
    # probabilities are the evaluation ones times mask / (1 - p): each either 0 or exactly 4/3 of the eval value.
    train_probs, eval_probs = first.attentions[0], evaluation.attentions[0]
    assert train_probs.shape == eval_probs.shape == (4, 4, 16, 16)
    torch.testing.assert_close(eval_probs.sum(dim=-1), torch.ones(4, 4, 16))  # softmax rows (Llama: causal)
    nonzero_in_eval = eval_probs != 0  # Llama's causal mask zeroes the future in both modes
    dropped = (train_probs == 0) & nonzero_in_eval
    kept = (train_probs != 0) & nonzero_in_eval
    torch.testing.assert_close(train_probs[kept], eval_probs[kept] / (1 - P))
    # Fraction dropped ~ Binomial(n, p) / n: within 6 standard deviations.
    n = int(nonzero_in_eval.sum())
    fraction = dropped.sum().item() / n
    assert abs(fraction - P) < 6 * math.sqrt(P * (1 - P) / n), (fraction, n)

    # Whole model: training differs from evaluation and between draws; the same seed repeats the draw.
    assert not torch.allclose(first.last_hidden_state, evaluation.last_hidden_state)
    assert not torch.equal(first.last_hidden_state, second.last_hidden_state)
    assert torch.equal(first.last_hidden_state, repeated.last_hidden_state)

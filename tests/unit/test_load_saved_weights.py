"""`common.saving.load_saved_weights` (what `--load_best_model_at_end` restores from `best/`) restores every weight,
also of the models whose weights transformers renames on save (found by the 2026-12-04 break test: run_mim's ViT
kept 32 of its 41 tensors from the last step while all_results.json said the best model was loaded)."""

import pytest
import torch
from transformers import BertConfig, BertForSequenceClassification, ViTConfig, ViTForMaskedImageModeling

from common.saving import load_saved_weights


def tiny(model_class, config, seed):
    torch.manual_seed(seed)
    return model_class(config).eval()


@pytest.mark.parametrize("model_class, config", [
    (ViTForMaskedImageModeling, ViTConfig(image_size=16, patch_size=4, hidden_size=16, num_hidden_layers=1,
                                          num_attention_heads=2, intermediate_size=32, encoder_stride=4)),
    (BertForSequenceClassification, BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                               num_attention_heads=2, intermediate_size=32, num_labels=3)),
])
def test_every_weight_comes_back(tmp_path, model_class, config):
    best = tiny(model_class, config, seed=0)
    best.save_pretrained(tmp_path)
    live = tiny(model_class, config, seed=1)
    assert any(not torch.equal(a, b) for a, b in zip(best.state_dict().values(), live.state_dict().values()))
    load_saved_weights(live, tmp_path)
    expected = best.state_dict()
    differing = [name for name, tensor in live.state_dict().items() if not torch.equal(tensor, expected[name])]
    assert differing == []


def test_a_saved_model_of_another_shape_is_refused(tmp_path):
    small = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                       intermediate_size=32, num_labels=3)
    tiny(BertForSequenceClassification, small, seed=0).save_pretrained(tmp_path)
    wider = BertConfig(**{**small.to_dict(), "intermediate_size": 48})
    with pytest.raises(ValueError, match="does not restore every weight"):
        load_saved_weights(tiny(BertForSequenceClassification, wider, seed=1), tmp_path)

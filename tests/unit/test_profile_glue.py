"""benchmarks/profile_glue.py: its classification of profiler events, on a real profiled training step."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import profile_glue  # noqa: E402


@pytest.mark.parametrize("name, expected", [
    ("forward (train)", "forward (train)"),
    ("forward (eval)", "forward (eval)"),
    ("autograd::engine::evaluate_function: AddmmBackward0", "backward"),
    ("Optimizer.step#AdamW.step", "optimizer"),
    ("Optimizer.zero_grad#AdamW.zero_grad", "optimizer"),
    ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "data loading"),
    ("aten::item", "other traced operators"),
])
def test_category_of(name, expected):
    assert profile_glue.category_of(name) == expected


def test_breakdown_of_a_profiled_training_step_and_evaluation():
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, num_labels=2)
    model = BertForSequenceClassification(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randint(0, 100, (8, 12)),
                                                                        torch.randint(0, 2, (8,))), batch_size=4)
    handles = profile_glue.install_forward_labels()
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            model.train()
            for input_ids, labels in loader:
                loss = model(input_ids=input_ids, labels=labels).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            model.eval()
            with torch.no_grad():
                for input_ids, _ in loader:
                    model(input_ids=input_ids)
    finally:
        for handle in handles:
            handle.remove()
    seconds, span, operators = profile_glue.breakdown(prof.events())
    for part in ("forward (train)", "backward", "optimizer", "data loading", "forward (eval)"):
        assert seconds[part] > 0, part
    # The parts tile the span: the untraced remainder is what is left, never negative.
    assert seconds[profile_glue.CATEGORIES[-1]] >= -1e-6
    assert sum(seconds.values()) == pytest.approx(span)
    # Nested model forwards (the encoder inside the classifier) are counted once, in the outermost label.
    labelled = [e for e in prof.events() if e.name == "forward (train)"]
    assert len(labelled) == 2  # 8 examples / batch 4
    assert operators and max(operators.values()) <= span


@pytest.mark.parametrize("name, expected", [
    ("aten::addmm", "matrix products"),
    ("aten::mm", "matrix products"),
    ("aten::bmm", "matrix products"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention (sdpa)"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "attention (sdpa)"),
    ("aten::mkldnn_convolution", "convolution"),
    ("aten::convolution_backward", "convolution"),
    ("aten::native_dropout", "dropout"),
    ("aten::bernoulli_", "dropout"),
    ("aten::copy_", "casts and copies"),
    ("aten::_to_copy", "casts and copies"),
    ("aten::gelu", "other operators (element-wise, norms, softmax, loss)"),
    ("aten::native_layer_norm", "other operators (element-wise, norms, softmax, loss)"),
])
def test_op_class_of(name, expected):
    import profile_script

    assert profile_script.op_class_of(name) == expected


def test_op_classes_tile_the_span_of_a_profiled_training_step():
    import profile_script
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, num_labels=2, hidden_dropout_prob=0.1)
    model = BertForSequenceClassification(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randint(0, 100, (8, 12)),
                                                                        torch.randint(0, 2, (8,))), batch_size=4)
    handles = profile_glue.install_forward_labels()
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            model.train()
            for input_ids, labels in loader:
                model(input_ids=input_ids, labels=labels).loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            model.eval()
            with torch.no_grad():
                model(input_ids=input_ids)
    finally:
        for handle in handles:
            handle.remove()
    classes = profile_script.op_classes(prof.events())
    _, span, _ = profile_glue.breakdown(prof.events())
    assert list(classes) == profile_script.OP_CLASSES
    for name in ("matrix products", "dropout", "optimizer step", "data loading"):
        assert classes[name] > 0, name
    assert classes["convolution"] == 0  # BERT has none
    # Every microsecond of the span counted once: the classes add up to it (untraced = the remainder, >= 0).
    assert sum(classes.values()) == pytest.approx(span, rel=1e-6)

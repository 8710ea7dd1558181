"""The generating evaluation of run_translation / run_summarization (`common.tasks.seq2seq`): length-sorted batches
give the texts of dataset-order batches, back in dataset order; greedy decoding matches one-example-at-a-time
`generate` exactly; the generated-token count and the speed figures; the rows gather_for_metrics drops.

In-process, one process, a tiny random Marian (a few seconds); the 2-process case (37 pairs, batches of 8: the
last round's repeats are not generated) is tests/examples/test_run_translation.py's
test_two_processes_write_one_translation_per_validation_pair, and evaluation-only parity on 1 and 2 processes is
tests/examples/test_eval_parity.py's.
"""

import types

import pytest
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
from transformers import DataCollatorForSeq2Seq, MarianConfig, MarianMTModel

from common.tasks import seq2seq

WORDS = "a small dog runs the cat sleeps anna sings on grass in the sun with her friends today".split()


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    texts = [" ".join(WORDS[i:i + n]) for i in range(len(WORDS)) for n in (2, 5, 9)]
    return seq2seq.train_seq2seq_tokenizer(texts * 5, tmp_path_factory.mktemp("gen_tokenizer"), vocab_size=90)


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)
    config = MarianConfig(vocab_size=len(tokenizer), decoder_vocab_size=len(tokenizer), d_model=16, encoder_layers=1,
                          decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                          decoder_ffn_dim=32, max_position_embeddings=64, init_std=1.0,
                          pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                          decoder_start_token_id=tokenizer.pad_token_id, forced_eos_token_id=None)
    model = MarianMTModel(config).eval()
    with torch.no_grad():  # large weights and a likelier eos: outputs that depend on the source and end at
        model.final_logits_bias[0, tokenizer.eos_token_id] = 3.0  # different steps (2-11 tokens)
    return model


@pytest.fixture(scope="module")
def examples(tokenizer):
    """21 sources of 1-15 words, lengths in no particular order."""
    texts = [" ".join(WORDS[(7 * i) % 10:(7 * i) % 10 + 1 + (5 * i) % 15]) for i in range(21)]
    return [{"input_ids": ids} for ids in tokenizer(texts)["input_ids"]]


GEN_KWARGS = {"max_length": 12, "num_beams": 1}


def run_generation(model, tokenizer, examples, order, batch_size=4):
    accelerator = Accelerator(cpu=True)
    collator = DataCollatorForSeq2Seq(tokenizer, model=model)
    if order is None:
        dataloader = DataLoader(examples, batch_size=batch_size, collate_fn=collator)
    else:
        args = types.SimpleNamespace(per_device_eval_batch_size=batch_size, dataloader_num_workers=0)
        dataloader, built_order = seq2seq.build_generation_dataloader(args, examples, collator)
        assert built_order == order
    return seq2seq.generate_texts(model, accelerator.prepare(dataloader), accelerator, tokenizer, GEN_KWARGS, order)


def test_length_sorted_order_longest_first_ties_in_dataset_order():
    dataset = [{"input_ids": [0] * n} for n in (3, 5, 3, 1, 5)]
    order = seq2seq.length_sorted_order(dataset)
    assert order == [1, 4, 0, 2, 3]
    assert seq2seq.restore_order(["b", "e", "a", "c", "d"], order) == ["a", "b", "c", "d", "e"]
    with pytest.raises(ValueError, match="4 outputs for 5 examples"):
        seq2seq.restore_order([1, 2, 3, 4], order)


def test_length_sorted_generation_equals_dataset_order_and_single_examples(model, tokenizer, examples):
    order = seq2seq.length_sorted_order(examples)
    assert order != list(range(len(examples)))  # the test data is not already sorted
    grouped = run_generation(model, tokenizer, examples, order)
    plain = run_generation(model, tokenizer, examples, None)
    assert grouped.texts == plain.texts and grouped.lengths == plain.lengths
    # Greedy decoding in batches is exactly one-example-at-a-time decoding (no padding at all).
    single_ids = []
    for example in examples:
        with torch.no_grad():
            single_ids.append(model.generate(input_ids=torch.tensor([example["input_ids"]]), **GEN_KWARGS)[0])
    assert grouped.texts == [seq2seq.decode_texts(tokenizer, ids[None])[0] for ids in single_ids]
    # Generated tokens: after the decoder start, up to and including the first eos, no padding.
    expected_lengths = []
    for ids in single_ids:
        body = ids[1:].tolist()
        expected_lengths.append(body.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in body
                                else len(body))
    assert grouped.lengths == expected_lengths
    assert len(set(expected_lengths)) > 2  # outputs of different lengths: the count is tested, not a constant
    speed = grouped.speed()
    assert speed["generation_runtime"] > 0 and speed["samples_per_second"] > 0
    assert speed["samples_per_second"] == pytest.approx(len(examples) / grouped.seconds, rel=1e-3)
    assert speed["generated_tokens_per_second"] == pytest.approx(sum(expected_lengths) / grouped.seconds, rel=1e-3)
    assert grouped.mean_length == sum(expected_lengths) / len(examples)


def test_generate_batch_fills_rows_that_gather_drops_without_generating(model, tokenizer, examples):
    """On process 1 of 2, in the last round of 21 examples in batches of 8 (remainder 5): no row is kept, so
    nothing is generated and the batch is all padding; on process 0 the first 5 rows are generated."""
    collator = DataCollatorForSeq2Seq(tokenizer, model=model)
    batch = collator(examples[:8])
    state = types.SimpleNamespace(end_of_dataloader=True, remainder=5)
    config = types.SimpleNamespace(split_batches=False, dispatch_batches=None)
    for process_index, kept in ((0, 5), (1, 0)):
        accelerator = types.SimpleNamespace(num_processes=2, process_index=process_index, gradient_state=state,
                                            dataloader_config=config)
        assert seq2seq.rows_kept_by_gather(accelerator, 8) == kept
    calls = []
    real = Accelerator(cpu=True)
    generate = model.generate
    model.generate = lambda **kwargs: calls.append(kwargs["input_ids"].shape[0]) or generate(**kwargs)
    try:
        fake = types.SimpleNamespace(
            distributed_type=real.distributed_type, unwrap_model=lambda m: m, autocast=real.autocast,
            pad_across_processes=lambda t, **kw: t, num_processes=2, gradient_state=state, dataloader_config=config)
        for process_index, kept in ((0, 5), (1, 0)):
            fake.process_index = process_index
            out = seq2seq.generate_batch(model, batch, fake, tokenizer, GEN_KWARGS)
            assert out.shape[0] == 8
            assert (out[kept:] == tokenizer.pad_token_id).all()
        with torch.no_grad():
            full = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], **GEN_KWARGS)
        first = seq2seq.generate_batch(model, batch, types.SimpleNamespace(**{**vars(fake), "process_index": 0}),
                                       tokenizer, GEN_KWARGS)
        assert seq2seq.decode_texts(tokenizer, first[:5]) == seq2seq.decode_texts(tokenizer, full[:5])
    finally:
        del model.generate
    assert calls[:2] == [5, 8]  # process 0 generated its 5 kept rows; process 1 nothing; then the full batch

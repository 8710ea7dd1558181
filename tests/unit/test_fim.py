"""Unit tests of examples/run_fim.py's FIM transformation, per-block seeding, collator, infilling cases and FIM-token
handling, and of examples/source_files_to_jsonl.py, on hand-made inputs with hand-computed answers."""

import argparse
import json
import math
import types

import datasets
import numpy as np
import pytest
import run_fim
import source_files_to_jsonl
import torch
import train_tokenizer

P, M, S, PAD = 1, 2, 3, 4
IDS = {"prefix": P, "middle": M, "suffix": S, "pad": PAD}
TOKENS = [10, 11, 12, 13, 14, 15, 16, 17]


# ---------------------------------------------------------------- the rearrangement, by hand
def test_psm_without_truncation_keeps_every_token():
    # prefix 10 11 | middle 12 13 14 | suffix 15 16 17
    ids, middle = run_fim.fim_rearrange(TOKENS, 2, 5, False, IDS, truncate_or_pad=False)
    assert ids == [P, 10, 11, S, 15, 16, 17, M, 12, 13, 14]
    assert middle == [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1]


def test_psm_and_spm_with_truncation_cut_the_sentinels_room_off_the_suffix():
    ids, middle = run_fim.fim_rearrange(TOKENS, 2, 5, False, IDS, truncate_or_pad=True)
    assert ids == [P, 10, 11, S, M, 12, 13, 14] and middle == [0, 0, 0, 0, 0, 1, 1, 1]
    # SPM: <pre> <suf> suffix <mid> prefix middle (the suffix, 3 tokens, is cut away whole)
    ids, middle = run_fim.fim_rearrange(TOKENS, 2, 5, True, IDS, truncate_or_pad=True)
    assert ids == [P, S, M, 10, 11, 12, 13, 14] and middle == [0, 0, 0, 0, 0, 1, 1, 1]
    ids, _ = run_fim.fim_rearrange(TOKENS, 1, 3, True, IDS, truncate_or_pad=False)
    assert ids == [P, S, 13, 14, 15, 16, 17, M, 10, 11, 12]


def test_a_suffix_shorter_than_the_sentinels_cuts_the_middle_end():
    # prefix 10..14 | middle 15 16 | suffix 17: the suffix goes, then 2 more tokens off the end (the middle)
    ids, middle = run_fim.fim_rearrange(TOKENS, 5, 7, False, IDS, truncate_or_pad=True)
    assert ids == [P, 10, 11, 12, 13, 14, S, M] and middle == [0] * 8
    # an empty middle
    ids, middle = run_fim.fim_rearrange(TOKENS, 3, 3, False, IDS, truncate_or_pad=False)
    assert ids == [P, 10, 11, 12, S, 13, 14, 15, 16, 17, M] and sum(middle) == 0


def test_draw_fim_rates_and_bounds():
    rng = np.random.default_rng(0)
    assert all(run_fim.draw_fim(rng, 8, 0.0, 0.5) is None for _ in range(50))
    draws = [run_fim.draw_fim(rng, 8, 1.0, 0.0) for _ in range(200)]
    assert all(0 <= start <= end <= 8 and not spm for start, end, spm in draws)
    assert all(run_fim.draw_fim(rng, 8, 1.0, 1.0)[2] for _ in range(50))
    share = np.mean([run_fim.draw_fim(rng, 8, 0.3, 0.5) is not None for _ in range(4000)])
    assert 0.27 < share < 0.33
    # the draw is a function of the seed alone
    assert run_fim.draw_fim(np.random.default_rng([0, 1, 2, 3]), 100, 0.5, 0.5) == \
        run_fim.draw_fim(np.random.default_rng([0, 1, 2, 3]), 100, 0.5, 0.5)


# ---------------------------------------------------------------- seeded blocks
def blocks(prefix=()):
    return datasets.Dataset.from_dict({"input_ids": [list(prefix) + [20 + 10 * b + i for i in range(8)]
                                                     for b in range(40)]})


def fim_blocks(stream, **kwargs):
    options = {"fim_rate": 0.5, "spm_rate": 0.5, "ids": IDS, "truncate_or_pad": True, "prefix": [], **kwargs}
    return run_fim.FimBlocks(blocks(options["prefix"]), 7, stream, **options)


def test_training_draws_depend_on_seed_epoch_and_index_only():
    first, again = fim_blocks(run_fim.TRAIN_FIM_STREAM), fim_blocks(run_fim.TRAIN_FIM_STREAM)
    rows = [first[i] for i in range(40)]
    assert [again[i] for i in reversed(range(40))] == rows[::-1]  # any order of access
    rearranged = sum(row["input_ids"][0] == P for row in rows)
    assert 8 < rearranged < 32  # about half at --fim_rate 0.5
    assert all(len(row["input_ids"]) == 8 and row["labels"] == row["input_ids"] for row in rows)
    again.set_epoch(1)
    assert [again[i] for i in range(40)] != rows  # new draws every epoch
    evaluation = fim_blocks(run_fim.EVAL_FIM_STREAM, fim_rate=1.0, score="middle")
    before = [evaluation[i] for i in range(40)]
    evaluation.set_epoch(3)
    assert [evaluation[i] for i in range(40)] == before  # evaluation draws never change


def test_streamed_blocks_are_drawn_from_seed_process_and_number():
    """--streaming: block n of a process's stream gets the draw of (seed, process, n), whatever came before it (a
    resumed stream numbers its next block as the uninterrupted one did: common.streaming.NumberedStream)."""
    streamed = run_fim.FimBlocks(None, 7, run_fim.STREAMED_TRAIN_FIM_STREAM, fim_rate=0.5, spm_rate=0.5, ids=IDS,
                                 truncate_or_pad=True, prefix=[])
    stream = [{"input_ids": row["input_ids"], "attention_mask": [1] * 8} for row in blocks()]

    def rows(process_index, numbers):
        return [run_fim.streamed_fim_block(stream[n], n, streamed, process_index) for n in numbers]

    first = rows(0, range(40))
    assert rows(0, range(20, 40)) == first[20:]  # a stream resumed at block 20
    assert 8 < sum(row["input_ids"][0] == P for row in first) < 32  # about half at --fim_rate 0.5
    assert all(len(row["input_ids"]) == 8 and row["labels"] == row["input_ids"] for row in first)
    assert rows(1, range(40)) != first  # each process draws its own
    assert first != [fim_blocks(run_fim.TRAIN_FIM_STREAM)[i] for i in range(40)]  # not the map-style stream's draws


def test_middle_scoring_and_left_to_right_label_the_same_tokens_behind_a_bos():
    fim = fim_blocks(run_fim.EVAL_FIM_STREAM, fim_rate=1.0, score="middle", prefix=[0], truncate_or_pad=False)
    l2r = fim_blocks(run_fim.EVAL_FIM_STREAM, fim_rate=1.0, score="middle", prefix=[0], truncate_or_pad=False,
                     left_to_right=True)
    for i in range(40):
        row, plain = fim[i], l2r[i]
        assert row["input_ids"][:2] == [0, P] and len(row["input_ids"]) == 1 + 8 + 3
        assert plain["input_ids"] == blocks([0])[i]["input_ids"]
        # the same middle tokens, in the same order, are the labels of both
        assert [t for t in row["labels"] if t != -100] == [t for t in plain["labels"] if t != -100]
        scored = [t for t in row["labels"] if t != -100]
        assert row["input_ids"][len(row["input_ids"]) - len(scored):] == scored  # the middle ends the block


@pytest.mark.parametrize("truncate_or_pad", [True, False])
@pytest.mark.parametrize("prefix", [[], [0]])
def test_block_sizes_with_no_middle_token_to_score_are_refused_before_training(truncate_or_pad, prefix, monkeypatch):
    """Break-test: --block_size 1 (or 3) trained, then evaluation stopped with "perplexity: no predicted token to
    score". For every draw of the cut points, the validation rows' labels (shifted by one, as the loss reads them)
    are counted, for the FIM rows and the left-to-right baseline: `check_fim_block_size` accepts exactly the block
    sizes where both can score a token."""
    smallest = None
    for block_size in range(len(prefix) + 1, 9):
        text = [20 + i for i in range(block_size - len(prefix))]
        best = {False: 0, True: 0}
        for start in range(len(text) + 1):
            for end in range(start, len(text) + 1):
                for spm in (False, True):
                    monkeypatch.setattr(run_fim, "draw_fim", lambda *args, draw=(start, end, spm): draw)
                    for left_to_right in best:
                        row = run_fim.FimBlocks(None, 0, run_fim.EVAL_FIM_STREAM, 1.0, 0.5, IDS, truncate_or_pad,
                                                prefix, score="middle", left_to_right=left_to_right
                                                ).rearrange(prefix + text, [0])
                        scored = sum(label != -100 for label in row["labels"][1:])  # token 0 predicts nothing
                        best[left_to_right] = max(best[left_to_right], scored)
        if best[False] and best[True]:
            smallest = smallest or block_size
            run_fim.check_fim_block_size(block_size, len(prefix), truncate_or_pad)
        else:
            assert smallest is None
            with pytest.raises(ValueError, match=rf"^--block_size {block_size}: expected at least "):
                run_fim.check_fim_block_size(block_size, len(prefix), truncate_or_pad)
    assert smallest == ((4 if truncate_or_pad else 1) + len(prefix) if prefix or truncate_or_pad else 2)


def test_block_size_error_names_the_minimum_and_why():
    with pytest.raises(ValueError) as error:
        run_fim.check_fim_block_size(3, 0, True)
    assert str(error.value) == (
        "--block_size 3: expected at least 4: with --truncate_or_pad (the default) a rearranged block keeps "
        "--block_size tokens, so its 3 FIM sentinels push 3 text tokens out, and a middle token is left to score "
        "only from 4 text tokens; a smaller block would train, then stop at the first evaluation with no middle "
        "token to score.")
    with pytest.raises(ValueError, match=r"^--block_size 4: expected at least 5 \(the tokenizer's 1 <bos> token\(s\) "
                                         r"\+ 4 text tokens\): with --truncate_or_pad"):
        run_fim.check_fim_block_size(4, 1, True)
    with pytest.raises(ValueError, match=r"^--block_size 1: expected at least 2: the left-to-right baseline scores "
                                         r"each middle token from the tokens before it, so a block needs 2 text "
                                         r"tokens \(the first has nothing before it\)"):
        run_fim.check_fim_block_size(1, 0, False)
    run_fim.check_fim_block_size(4, 0, True)
    run_fim.check_fim_block_size(2, 0, False)


def test_collator_pads_with_the_fim_pad_token():
    collator = run_fim.FimCollator(PAD, pad_to_multiple_of=4)
    batch = collator([{"input_ids": [5, 6, 7], "labels": [5, 6, 7]}, {"input_ids": [5], "labels": [-100]}])
    assert batch["input_ids"].tolist() == [[5, 6, 7, PAD], [5, PAD, PAD, PAD]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0], [1, 0, 0, 0]]
    assert batch["labels"].tolist() == [[5, 6, 7, -100], [-100, -100, -100, -100]]
    assert run_fim.FimCollator(PAD, pad_to_length=6)([{"input_ids": [5], "labels": [5]}])["input_ids"].shape == (1, 6)


def test_the_loss_items_are_the_tokens_the_causal_lm_loss_averages_and_accumulation_keeps_the_gradient():
    # Issue 36: run_fim's TrainingRun counts label_tokens(shift=1). On training rows of unequal lengths
    # (--no-truncate_or_pad: a rearranged block is 3 tokens longer, so batches are padded, label -100 there), that
    # count is every token of a row but its first, and the model's mean loss times it is the summed cross-entropy of
    # exactly those next-token predictions; so micro-batches of 2 summed that way and divided by the window's count
    # give the gradient of the batch of 4 (the identity common/accumulation.py rests on).
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from common.accumulation import label_tokens

    rows = [fim_blocks(run_fim.TRAIN_FIM_STREAM, prefix=[0], truncate_or_pad=False)[i] for i in range(8)]
    assert len({len(row["input_ids"]) for row in rows}) == 2  # 9 and 12 tokens: padded batches
    collator, count = run_fim.FimCollator(PAD), label_tokens(shift=1)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=420, n_positions=16, n_embd=16, n_layer=1, n_head=2,
                                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    batch = collator(rows[:4])
    assert int(count(batch)) == sum(len(row["input_ids"]) - 1 for row in rows[:4])
    loss = model(**batch).loss
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    summed = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 420), batch["labels"][:, 1:].reshape(-1),
                                               reduction="sum")
    assert torch.allclose(loss * count(batch), summed, rtol=1e-5)

    def gradients(micro_batches):
        model.zero_grad()
        total = sum(int(count(micro)) for micro in micro_batches)
        for micro in micro_batches:
            (model(**micro).loss * count(micro) / total).backward()
        return [p.grad.clone() for p in model.parameters()]

    # rows 0-3 in one batch (padded to 12), and as two micro-batches of different widths and token counts
    micro = [collator([rows[i] for i in (0, 2)]), collator([rows[i] for i in (1, 3)])]  # 12 and 9 wide
    assert int(count(micro[0])) != int(count(micro[1]))
    for whole, split in zip(gradients([batch]), gradients(micro)):
        assert torch.allclose(whole, split, rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------- infilling
def test_infill_case_cuts_whole_inner_lines():
    text = "def f():\n    x = 1\n\n    return x\n"
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(30):
        prefix, middle, suffix = run_fim.infill_case(text, rng, max_lines=2)
        assert prefix + middle + suffix == text
        # line 2 is blank, 3 is last; the cuts fall before line breaks: "\n    x = 1" is how BPE splits it
        assert middle in ("\n    x = 1", "\n    x = 1\n") and prefix == "def f():"
        seen.add(middle)
    assert len(seen) == 2
    assert run_fim.infill_case("one\ntwo\n", rng, 1) is None
    assert run_fim.infill_case("one\ntwo\nthree", rng, 1) == ("one", "\ntwo", "\nthree")
    assert run_fim.normalise_whitespace("  return   x\n\n") == "return x"
    # a generated answer is cut where its span ends: from its first non-blank character, as many lines as the middle
    assert run_fim.cut_answer("\n    return x\n    y = 2\n", "\n    return x") == "return x"
    assert run_fim.cut_answer("\na\n\nb\nc", "\nx\n") == "a\n"
    assert run_fim.cut_answer("\na\nb\nc", "\nx\ny") == "a\nb"
    # the right lines without the line break before them are still the span (was cut to "y = b\nend a b")
    assert run_fim.cut_answer("y = b\nend a b\n", "\ny = b") == "y = b"
    assert run_fim.cut_answer("):  # more", "\nreturn x") == "):  # more"


# ---------------------------------------------------------------- FIM tokens
@pytest.fixture(scope="module")
def code_tokenizer(tmp_path_factory):
    from accelerate import PartialState

    PartialState(cpu=True)  # run_fim logs through accelerate's logger
    lines = [f"def f{i}(x):\n    return x + {i}\n" for i in range(50)]
    return train_tokenizer.train_byte_level_bpe(lines, vocab_size=300, model_max_length=64,
                                                output_dir=tmp_path_factory.mktemp("tok"))


def token_args(**overrides):
    values = {"fim_prefix_token": "<fim_prefix>", "fim_middle_token": "<fim_middle>",
              "fim_suffix_token": "<fim_suffix>", "fim_pad_token": "<fim_pad>", **overrides}
    return types.SimpleNamespace(**values)


def test_missing_fim_tokens_are_added_and_present_ones_reused(code_tokenizer):
    import copy

    tokenizer = copy.deepcopy(code_tokenizer)
    size = len(tokenizer)
    ids, added = run_fim.resolve_fim_token_ids(token_args(), tokenizer)
    assert added == ["<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>"]
    assert sorted(ids.values()) == list(range(size, size + 4)) and len(tokenizer) == size + 4
    # a tokenizer that has them (as StarCoder's): reused, nothing added
    again, added = run_fim.resolve_fim_token_ids(token_args(), tokenizer)
    assert again == ids and added == [] and len(tokenizer) == size + 4
    # the end-of-text token may serve as the pad token
    args = token_args(fim_pad_token="<|endoftext|>")
    ids, added = run_fim.resolve_fim_token_ids(args, copy.deepcopy(code_tokenizer))
    assert ids["pad"] == code_tokenizer.convert_tokens_to_ids("<|endoftext|>") and "<|endoftext|>" not in added


def test_added_fim_embeddings_of_a_pretrained_tied_model_start_distinct_from_their_pieces(code_tokenizer, tmp_path):
    # transformers' resize_token_embeddings samples new rows from N(mean, 1e-9 x covariance): the four FIM tokens
    # would start as one vector. run_fim starts each from the mean of its text's pieces (tied output: same rows).
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(code_tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    code_tokenizer.save_pretrained(tmp_path)
    old = LlamaForCausalLM.from_pretrained(tmp_path).get_input_embeddings().weight.detach()
    args = types.SimpleNamespace(**vars(token_args()), model_name_or_path=str(tmp_path), tokenizer_name=None,
                                 config_name=None, use_slow_tokenizer=False, trust_remote_code=False)
    accelerator = types.SimpleNamespace(device=torch.device("cpu"))
    tokenizer, model, ids, added = run_fim.load_model_and_tokenizer(args, accelerator)
    assert len(added) == 4 and model.get_input_embeddings().weight.shape[0] == math.ceil(len(tokenizer) / 8) * 8
    rows = model.get_input_embeddings().weight.detach()
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    for role, token in (("prefix", "<fim_prefix>"), ("middle", "<fim_middle>"), ("suffix", "<fim_suffix>"),
                        ("pad", "<fim_pad>")):
        pieces = code_tokenizer(token, add_special_tokens=False)["input_ids"]
        assert len(pieces) > 1 and torch.allclose(rows[ids[role]], old[pieces].mean(dim=0))
    assert torch.equal(rows[: len(code_tokenizer)], old)  # the pretrained rows untouched
    cosine = torch.nn.functional.cosine_similarity
    sentinels = [rows[ids[role]] for role in ("prefix", "middle", "suffix")]
    assert all(cosine(a, b, dim=0) < 0.99 for i, a in enumerate(sentinels) for b in sentinels[i + 1:])
    # what transformers alone gives: one vector for all of them
    plain = LlamaForCausalLM.from_pretrained(tmp_path)
    plain.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=8)
    plain_rows = plain.get_input_embeddings().weight.detach()
    assert cosine(plain_rows[ids["prefix"]], plain_rows[ids["suffix"]], dim=0) > 0.9999


def test_bad_fim_tokens_are_refused_before_training(code_tokenizer):
    import copy

    assert "def" in code_tokenizer.get_vocab()
    with pytest.raises(ValueError, match=r"--fim_middle_token 'def' is an ordinary token of the tokenizer's vocab"):
        run_fim.resolve_fim_token_ids(token_args(fim_middle_token="def"), copy.deepcopy(code_tokenizer))
    with pytest.raises(ValueError, match=r"--fim_pad_token '': the tokenizer encodes it as 0 ids \[\]; a FIM token "
                                         r"must be exactly one id"):
        run_fim.resolve_fim_token_ids(token_args(fim_pad_token=""), copy.deepcopy(code_tokenizer))
    with pytest.raises(ValueError, match="The four FIM tokens must differ"):
        run_fim.resolve_fim_token_ids(token_args(fim_pad_token="<fim_prefix>"), copy.deepcopy(code_tokenizer))


@pytest.mark.parametrize("value", ["1.5", "-0.1", "half"])
def test_fim_rates_outside_0_1_are_refused(value, capsys):
    with pytest.raises(argparse.ArgumentTypeError, match="expected a rate from 0 to 1"):
        run_fim.rate(value)
    with pytest.raises(SystemExit):
        run_fim.parse_args(["--model_type", "gpt2", "--tokenizer_name", "t", "--train_file", "a.txt",
                            "--output_dir", "o", "--fim_rate", value])
    expected = repr(value) if value == "half" else str(float(value))
    assert f"argument --fim_rate: expected a rate from 0 to 1, got {expected}" in capsys.readouterr().err
    assert run_fim.rate("0") == 0.0 and run_fim.rate("1") == 1.0


# ---------------------------------------------------------------- source files -> JSON Lines
def test_source_files_split_by_file(tmp_path):
    source = tmp_path / "src"
    (source / "pkg" / "test").mkdir(parents=True)
    for i in range(6):
        (source / "pkg" / f"m{i}.py").write_text(f"x = {i}\n")
    (source / "pkg" / "test" / "t.py").write_text("assert 1\n")
    (source / "latin.py").write_bytes(b"s = '\xe9'\n")
    (source / "empty.py").write_text("\n")
    counts = source_files_to_jsonl.main(["--source_dir", str(source), "--validation_files", "2", "--seed", "3",
                                         "--output_dir", str(tmp_path / "out")])
    assert counts == {"train": 4, "validation": 2}
    rows = {split: [json.loads(line) for line in (tmp_path / "out" / f"{split}.jsonl").read_text().splitlines()]
            for split in ("train", "validation")}
    paths = [row["path"] for split in rows.values() for row in split]
    assert sorted(paths) == [f"pkg/m{i}.py" for i in range(6)]  # test/, non-UTF-8 and empty files left out
    assert all(row["text"] == f"x = {row['path'][5]}\n" for split in rows.values() for row in split)
    again = source_files_to_jsonl.split_by_file([{"path": str(i)} for i in range(6)], 2, 3)
    # seeded: the same draw on the same number of rows (here the 6 read files in path order)
    assert [f"pkg/m{row['path']}.py" for row in again[1]] == [row["path"] for row in rows["validation"]]
    with pytest.raises(ValueError, match="--validation_files 6: only 6 files were read"):
        source_files_to_jsonl.split_by_file([{"path": str(i)} for i in range(6)], 6, 0)

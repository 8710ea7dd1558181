"""Unit tests of run_mlm.py's task helpers on hand-made inputs with hand-computed answers: the number of tokens
chosen, the 80/10/10 corruption, whole words for WordPiece ('##' continuations) and byte-level BPE ('Ġ' word
starts), blocks of concatenated text and their remainder, per-example mask seeds, the collator, perplexity
weighted by masked tokens (not batches), the model length limit, and gutenberg_text.py's body extraction."""

import math
from collections import Counter

import numpy as np
import pytest
import torch
from accelerate import PartialState
from gutenberg_text import gutenberg_body
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import BertConfig, PreTrainedTokenizerFast, RobertaConfig

from common.metrics import load_metric
from common.tasks.lm_data import token_loss_sums
from conftest import SHARED_DATA
from run_mlm import (
    EVAL_MASK_STREAM,
    TRAIN_MASK_STREAM,
    DataCollatorForSeededMLM,
    MaskSeededDataset,
    group_texts,
    mask_example,
    model_max_positions,
    num_tokens_to_mask,
    resolve_max_seq_length,
    special_token_layout,
    word_starts,
)

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
WORDPIECE_VOCAB = {"[PAD]": PAD, "[UNK]": UNK, "[CLS]": CLS, "[SEP]": SEP, "[MASK]": MASK, "the": 5, "cat": 6,
                   "un": 7, "##aff": 8, "##able": 9, ",": 10, "dog": 11, "##s": 12}


@pytest.fixture(scope="module")
def wordpiece():
    """A BERT-style tokenizer with a fixed 13-token vocabulary: "unaffable" -> un ##aff ##able."""
    tokenizer = Tokenizer(models.WordPiece(WORDPIECE_VOCAB, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", CLS), ("[SEP]", SEP)])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="[PAD]", unk_token="[UNK]",
                                   cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]", model_max_length=64)


@pytest.fixture(scope="module")
def byte_level_bpe():
    """A byte-level BPE (GPT-2/RoBERTa scheme) whose merges make " unaffable" -> Ġun aff able."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    merges = [("Ġ", "u"), ("Ġu", "n"), ("a", "f"), ("af", "f"), ("a", "b"), ("ab", "l"), ("abl", "e")]
    vocab = {"<pad>": 0, "<mask>": 1}
    for token in alphabet + ["".join(pair) for pair in merges]:
        vocab.setdefault(token, len(vocab))
    tokenizer = Tokenizer(models.BPE(vocab, merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", mask_token="<mask>")


# ------------------------------------------------------------------ how many tokens, which words
@pytest.mark.parametrize("candidates, probability, expected", [
    (0, 0.15, 0),     # nothing to choose
    (1, 0.15, 1),     # 0.15 rounds to 0, but every example gets one prediction
    (6, 0.15, 1),     # 0.9 -> 1
    (20, 0.15, 3),    # 3.0
    (30, 0.15, 5),    # 4.5: halves round up
    (10, 0.25, 3),    # 2.5 -> 3
    (126, 0.15, 19),  # 18.9 -> 19 (a block of 128 with [CLS] and [SEP])
    (13, 0.5, 7),     # 6.5 -> 7
])
def test_num_tokens_to_mask(candidates, probability, expected):
    assert num_tokens_to_mask(candidates, probability) == expected


def test_word_starts_from_word_ids():
    assert word_starts([None, 0, 0, 0, 1, 2, 2, None]) == [0, 1, 0, 0, 1, 1, 0, 0]
    assert word_starts([3, 3, 4]) == [1, 0, 1]  # a text's first token starts a word


def test_wordpiece_continuations_belong_to_their_word(wordpiece):
    encoding = wordpiece(["the unaffable cat, dogs"], add_special_tokens=False)
    tokens = wordpiece.convert_ids_to_tokens(encoding["input_ids"][0])
    assert tokens == ["the", "un", "##aff", "##able", "cat", ",", "dog", "##s"]
    assert word_starts(encoding.word_ids(0)) == [1, 1, 0, 0, 1, 1, 1, 0]


def test_byte_level_bpe_words_start_at_the_space_mark(byte_level_bpe):
    encoding = byte_level_bpe(["the unaffable cat"], add_special_tokens=False)
    tokens = byte_level_bpe.convert_ids_to_tokens(encoding["input_ids"][0])
    assert tokens == ["t", "h", "e", "Ġun", "aff", "able", "Ġ", "c", "a", "t"]
    assert word_starts(encoding.word_ids(0)) == [1, 0, 0, 1, 0, 0, 1, 0, 0, 0]


def test_special_token_layout(wordpiece):
    assert special_token_layout(wordpiece) == ([CLS], [SEP])


# ------------------------------------------------------------------ masking one example
def rng(seed):
    return np.random.default_rng(seed)


def test_token_masking_chooses_exactly_the_count_and_never_special_tokens():
    ids = np.array([CLS] + list(range(100, 120)) + [SEP])  # 20 text tokens
    special = np.array([1] + [0] * 20 + [1])
    random_ids = np.arange(1000, 2000)
    for seed in range(50):
        inputs, labels = mask_example(ids, special, None, rng(seed), 0.15, MASK, random_ids)
        chosen = np.flatnonzero(labels != -100)
        assert len(chosen) == 3 and 0 not in chosen and 21 not in chosen
        assert (labels[chosen] == ids[chosen]).all()
        unchosen = np.setdiff1d(np.arange(len(ids)), chosen)
        assert (inputs[unchosen] == ids[unchosen]).all()
        for position in chosen:  # the mask token, a random token, or the token itself
            assert inputs[position] == MASK or inputs[position] == ids[position] or inputs[position] in random_ids


def test_80_10_10_replacement():
    """40,000 chosen tokens (4,000 examples x 10): shares within 1 point of 0.8 / 0.1 / 0.1 (binomial standard
    deviations 0.2 and 0.15 points). Random replacements come from ids 1000-1999, never the original (100-149)."""
    ids = np.array([CLS] + list(range(100, 150)) + [SEP])
    special = np.array([1] + [0] * 50 + [1])
    counts = Counter()
    for seed in range(4000):
        inputs, labels = mask_example(ids, special, None, rng(seed), 0.2, MASK, np.arange(1000, 2000))
        chosen = labels != -100
        assert chosen.sum() == 10
        counts["mask"] += int((inputs[chosen] == MASK).sum())
        counts["random"] += int((inputs[chosen] >= 1000).sum())
        counts["kept"] += int((inputs[chosen] == ids[chosen]).sum())
    assert sum(counts.values()) == 40000
    assert abs(counts["mask"] / 40000 - 0.8) < 0.01
    assert abs(counts["random"] / 40000 - 0.1) < 0.01
    assert abs(counts["kept"] / 40000 - 0.1) < 0.01


def test_whole_word_masking_takes_whole_words():
    # [CLS] the un ##aff ##able cat , dog ##s [SEP]: words {1}, {2,3,4}, {5}, {6}, {7,8}; 8 candidates x 0.4
    # = 3.2 -> 3 tokens: whole words adding up to at most 3 tokens.
    ids = np.array([CLS, 5, 7, 8, 9, 6, 10, 11, 12, SEP])
    special = np.array([1, 0, 0, 0, 0, 0, 0, 0, 0, 1])
    starts = np.array([0, 1, 1, 0, 0, 1, 1, 1, 0, 0])
    words = [{1}, {2, 3, 4}, {5}, {6}, {7, 8}]
    seen = set()
    for seed in range(200):
        _, labels = mask_example(ids, special, starts, rng(seed), 0.4, MASK, np.arange(20, 30))
        chosen = set(np.flatnonzero(labels != -100).tolist())
        assert all(word <= chosen or not word & chosen for word in words), chosen
        assert 1 <= len(chosen) <= 3
        seen.add(frozenset(chosen))
    assert frozenset({2, 3, 4}) in seen and frozenset({7, 8, 1}) in seen  # long words are drawn too


def test_whole_word_longer_than_the_count_is_taken_whole():
    # One word of 3 sub-tokens, 0.15 x 3 -> 1 token: the word is chosen entire (3 predictions), not cut.
    ids = np.array([CLS, 7, 8, 9, SEP])
    _, labels = mask_example(ids, [1, 0, 0, 0, 1], [0, 1, 0, 0, 0], rng(0), 0.15, MASK, np.arange(20, 30))
    assert labels.tolist() == [-100, 7, 8, 9, -100]


def test_continuation_at_a_block_start_is_a_word_of_its_own():
    # A block starting mid-word ([CLS] ##aff ##able cat [SEP]): the two continuations form one word.
    ids = np.array([CLS, 8, 9, 6, SEP])
    starts = [0, 0, 0, 1, 0]
    chosen_sets = set()
    for seed in range(100):
        _, labels = mask_example(ids, [1, 0, 0, 0, 1], starts, rng(seed), 0.5, MASK, np.arange(20, 30))
        chosen_sets.add(tuple(np.flatnonzero(labels != -100)))
    assert chosen_sets == {(1, 2), (3,)}  # budget round(1.5) = 2: either word, never a split word


# ------------------------------------------------------------------ blocks of concatenated text
def test_group_texts_blocks_and_remainder():
    examples = {"input_ids": [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14]],
                "word_start": [[1, 0, 1], [1, 1], [0, 1, 0, 1], [1]]}
    blocks = group_texts(examples, content_length=3, prefix=[CLS], suffix=[SEP])
    assert blocks["input_ids"] == [[CLS, 5, 6, 7, SEP], [CLS, 8, 9, 10, SEP], [CLS, 11, 12, 13, SEP],
                                   [CLS, 14, SEP]]  # 10 tokens = 3 full blocks of 3 + the remainder, kept
    assert blocks["special_tokens_mask"] == [[1, 0, 0, 0, 1]] * 3 + [[1, 0, 1]]
    assert blocks["word_start"] == [[0, 1, 0, 1, 0], [0, 1, 1, 0, 0], [0, 1, 0, 1, 0], [0, 1, 0]]


def test_group_texts_without_remainder_and_without_text():
    blocks = group_texts({"input_ids": [[5, 6], [7, 8]]}, content_length=2, prefix=[CLS], suffix=[SEP])
    assert blocks == {"input_ids": [[CLS, 5, 6, SEP], [CLS, 7, 8, SEP]],
                      "special_tokens_mask": [[1, 0, 0, 1], [1, 0, 0, 1]]}
    assert group_texts({"input_ids": [[], []]}, 2, [CLS], [SEP]) == {"input_ids": [], "special_tokens_mask": []}


# ------------------------------------------------------------------ per-example seeds and the collator
class Rows:
    """A list of rows standing in for a `datasets.Dataset`."""

    def __init__(self, rows):
        self.rows = rows
        self.column_names = list(rows[0])

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        return self.rows[index]


def rows(n=6):
    return Rows([{"input_ids": [CLS] + list(range(5, 5 + 3 + i)) + [SEP],
                  "special_tokens_mask": [1] + [0] * (3 + i) + [1]} for i in range(n)])


def test_training_masks_change_with_the_epoch_evaluation_masks_do_not():
    train = MaskSeededDataset(rows(), seed=7, stream=TRAIN_MASK_STREAM)
    evaluation = MaskSeededDataset(rows(), seed=7, stream=EVAL_MASK_STREAM)
    assert train[2]["mask_seed"] == [TRAIN_MASK_STREAM, 7, 0, 2]
    train.set_epoch(3)
    evaluation.set_epoch(3)
    assert train[2]["mask_seed"] == [TRAIN_MASK_STREAM, 7, 3, 2]
    assert evaluation[2]["mask_seed"] == [EVAL_MASK_STREAM, 7, 0, 2]


def test_masks_do_not_depend_on_the_batch(wordpiece):
    """Example 3 collated alone or among others (another padded length) gets the same masks."""
    dataset = MaskSeededDataset(rows(), seed=0, stream=EVAL_MASK_STREAM)
    collator = DataCollatorForSeededMLM(wordpiece, 0.5)
    alone = collator([dataset[3]])
    together = collator([dataset[5], dataset[3], dataset[0]])
    length = len(dataset[3]["input_ids"])  # 8
    assert together["input_ids"].shape == (3, 10)
    for key in ("input_ids", "labels"):
        assert torch.equal(alone[key][0], together[key][1, :length])
    assert together["attention_mask"][1].tolist() == [1] * 8 + [0, 0]
    assert together["labels"][1, length:].tolist() == [-100, -100]
    assert together["input_ids"][1, length:].tolist() == [PAD, PAD]
    assert (alone["labels"] != -100).sum().item() == 3  # 6 text tokens x 0.5


def test_collator_pads_to_a_multiple_and_replaces_with_ordinary_tokens(wordpiece):
    collator = DataCollatorForSeededMLM(wordpiece, 0.15, pad_to_multiple_of=8)
    assert collator.random_token_ids.tolist() == list(range(5, 13))  # the vocabulary less its 5 special tokens
    batch = collator([MaskSeededDataset(rows(), 0, TRAIN_MASK_STREAM)[i] for i in (0, 5)])
    assert batch["input_ids"].shape == (2, 16)  # longest 10 -> 16


def test_evaluation_collator_pads_every_batch_to_one_length(wordpiece):
    """Evaluation pads to the longest validation example: example 0 (5 tokens) gets the same shape alone or
    beside example 5 (10 tokens), hence the same float results on 1 and 2 processes."""
    dataset = MaskSeededDataset(rows(), seed=0, stream=EVAL_MASK_STREAM)
    collator = DataCollatorForSeededMLM(wordpiece, 0.15, pad_to_length=10)
    alone, together = collator([dataset[0]]), collator([dataset[5], dataset[0]])
    assert alone["input_ids"].shape == (1, 10) and together["input_ids"].shape == (2, 10)
    assert torch.equal(alone["input_ids"][0], together["input_ids"][1])
    assert alone["attention_mask"][0].tolist() == [1] * 5 + [0] * 5


# ------------------------------------------------------------------ perplexity weighted by masked tokens
def test_perplexity_weights_masked_tokens_not_batches():
    """Two examples scored in two batches: A has 1 masked token predicted with p = 1/2 (loss ln 2), B has 3
    predicted with p = 1/4 (ln 4 each). Token-weighted: (ln 2 + 3 ln 4) / 4 = 7/4 ln 2 -> perplexity 2^(7/4) =
    3.3636; the mean of the two batch means, (ln 2 + ln 4) / 2, would give 2^1.5 = 2.83."""
    logits_a = torch.zeros(1, 3, 2)  # uniform over 2 tokens
    labels_a = torch.tensor([[-100, 0, -100]])
    logits_b = torch.tensor([[[0.0, math.log(3)]] * 3])  # p(token 0) = 1 / (1 + 3)
    labels_b = torch.tensor([[0, 0, 0]])
    metric = load_metric("perplexity", keep_in_memory=True)
    for logits, labels in ((logits_a, labels_a), (logits_b, labels_b)):
        sums, counts = token_loss_sums(logits, labels, shift=False)
        metric.add_batch(loss_sums=sums.double().numpy(), token_counts=counts.numpy())
    sums_b, counts_b = token_loss_sums(logits_b, labels_b, shift=False)
    assert sums_b.item() == pytest.approx(3 * math.log(4)) and counts_b.tolist() == [3]
    result = metric.compute()
    assert result["tokens"] == 4
    assert result["loss"] == pytest.approx(7 / 4 * math.log(2))
    assert result["perplexity"] == pytest.approx(2 ** 1.75)


# ------------------------------------------------------------------ the model's length limit
def test_max_seq_length_limits(wordpiece):
    PartialState(cpu=True)  # run_mlm logs the default through accelerate's logger
    bert = BertConfig(max_position_embeddings=128)
    assert model_max_positions(bert) == 128
    assert model_max_positions(RobertaConfig(max_position_embeddings=514, pad_token_id=1)) == 512
    assert resolve_max_seq_length(None, wordpiece, bert, "tiny") == 64  # tokenizer's model_max_length
    assert resolve_max_seq_length(None, wordpiece, BertConfig(max_position_embeddings=40), "tiny") == 40
    assert resolve_max_seq_length(128, wordpiece, bert, "tiny") == 128
    with pytest.raises(ValueError, match=r"--max_seq_length 129: the model \(tiny\) has position embeddings for "
                                         r"128 tokens"):
        resolve_max_seq_length(129, wordpiece, bert, "tiny")
    with pytest.raises(ValueError, match=r"--max_seq_length 2: an example needs at least 3 tokens"):
        resolve_max_seq_length(2, wordpiece, bert, "tiny")


# ------------------------------------------------------------------ gutenberg_text.py
BOOK = ("\ufeffThe Project Gutenberg EBook of X\r\n\r\n*** START OF THIS PROJECT GUTENBERG EBOOK X ***\r\n"
        "Chapter 1\r\n\r\nIt is a truth.\r\n*** END OF THIS PROJECT GUTENBERG EBOOK X ***\r\nLicence text\r\n")


def test_gutenberg_body_is_strictly_between_the_markers():
    assert gutenberg_body(BOOK.encode("utf-8").decode("utf-8-sig")) == ["Chapter 1", "", "It is a truth."]
    newer = BOOK.replace("OF THIS PROJECT", "OF THE PROJECT")
    assert gutenberg_body(newer) == ["Chapter 1", "", "It is a truth."]


def test_gutenberg_without_end_marker_is_an_error():
    with pytest.raises(ValueError, match=r"book\.txt: no '\*\*\* END OF THIS PROJECT GUTENBERG EBOOK .*line 3"):
        gutenberg_body(BOOK.split("*** END")[0], "book.txt")
    with pytest.raises(ValueError, match=r"book\.txt: no '\*\*\* START"):
        gutenberg_body("just text\n", "book.txt")


@pytest.mark.realdata
@pytest.mark.parametrize("name, words, lines", [("1342-0.txt", 121584, 13069 - 21 - 1),
                                                ("2701-0.txt", 212813, 21972 - 22 - 1),
                                                ("1661.txt", 104519, 12695 - 20 - 1)])
def test_gutenberg_bodies_match_the_data_readme(name, words, lines):
    """The body word counts and marker lines verified in ../shared/data/README.md, section 10."""
    path = SHARED_DATA / "gutenberg" / name
    if not path.is_file():
        pytest.skip(f"{path} not found (set SHARED_DATA_DIR)")
    body = gutenberg_body(path.read_text(encoding="utf-8-sig"), name)
    assert len(body) == lines
    assert sum(len(line.split()) for line in body) == words

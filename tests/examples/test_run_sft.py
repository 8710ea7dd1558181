"""examples/run_sft.py: which tokens carry loss, packing's loss equality, the refusals before training, and launched
runs of a tiny Llama (ChatML template) that learns to answer a sentiment question, on 1 and 2 processes."""

import json
import random

import pytest
import run_sft
import torch

from conftest import FILLER, NEGATIVE, POSITIVE, launch, read_results, sentiment_sentence

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
QUESTION = "Is this positive or negative? "


def write_sentiment_chats(directory, n_train=240, n_eval=40, seed=0):
    """Conversations: the user asks about a sentence with 3 words of one sentiment; the assistant answers
    "positive" or "negative". Returns {"train": path, "validation": path} (.jsonl)."""
    rng = random.Random(seed)
    paths = {}
    for split, n in (("train", n_train), ("validation", n_eval)):
        rows = []
        for _ in range(n):
            positive = rng.random() < 0.5
            rows.append({"messages": [{"role": "user", "content": QUESTION + sentiment_sentence(rng, positive)},
                                      {"role": "assistant", "content": "positive" if positive else "negative"}]})
        paths[split] = directory / f"{split}.jsonl"
        paths[split].write_text("".join(json.dumps(r) + "\n" for r in rows))
    return paths


@pytest.fixture(scope="module")
def chat_data(tmp_path_factory):
    return write_sentiment_chats(tmp_path_factory.mktemp("sft_data"))


def word_tokenizer(path=None):
    """A word-level tokenizer over the test words and the ChatML markup, with the ChatML template: every word,
    newline and marker is one token, so label positions can be counted by hand."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>", "\n", "system", "user", "assistant", "positive",
             "negative", "hi", "hello", "be", "brief", "ok", "?", "or", "Is", "this"] + POSITIVE + NEGATIVE + FILLER
    vocab = {w: i for i, w in enumerate(dict.fromkeys(words))}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(" "), behavior="removed"),
                                                     pre_tokenizers.Split(Regex(r"\n|\?"), behavior="isolated")])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>",
                                        eos_token="<|im_end|>", additional_special_tokens=["<|im_start|>"])
    tokenizer.chat_template = CHATML
    if path is not None:
        tokenizer.save_pretrained(path)
    return tokenizer


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    """A 2-layer Llama (width 32) with the word tokenizer, saved as a user's checkpoint folder."""
    from transformers import LlamaConfig, LlamaForCausalLM

    path = tmp_path_factory.mktemp("tiny_llama")
    tokenizer = word_tokenizer(path)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(path)
    return path


def args_for(**overrides):
    args = run_sft.parse_args(["--model_name_or_path", "x", "--train_file", "x.jsonl", "--output_dir", "x"])
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


def test_two_turn_conversation_puts_loss_on_the_assistant_tokens_only():
    """system, user, assistant, user, assistant in ChatML: the loss falls on exactly each answer's words and its
    <|im_end|> and newline (positions counted by hand), nothing of the system, the users or the markup."""
    tokenizer = word_tokenizer()
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"}, {"role": "user", "content": "ok ?"},
                {"role": "assistant", "content": "positive or negative"}]
    example = run_sft.tokenize_conversation(tokenizer, messages, False, "row 0")
    tokens = tokenizer.convert_ids_to_tokens(example["input_ids"])
    # 0 <|im_start|> 1 system 2 \n 3 be 4 brief 5 <|im_end|> 6 \n  7 <|im_start|> 8 user 9 \n 10 hi 11 <|im_end|> 12 \n
    # 13 <|im_start|> 14 assistant 15 \n 16 hello 17 <|im_end|> 18 \n  19 <|im_start|> 20 user 21 \n 22 ok 23 ? 24
    # <|im_end|> 25 \n  26 <|im_start|> 27 assistant 28 \n 29 positive 30 or 31 negative 32 <|im_end|> 33 \n
    assert len(tokens) == 34 and tokens[16] == "hello" and tokens[29:32] == ["positive", "or", "negative"]
    with_loss = [i for i, label in enumerate(example["labels"]) if label != -100]
    assert with_loss == [16, 17, 18, 29, 30, 31, 32, 33]
    assert all(example["labels"][i] == example["input_ids"][i] for i in with_loss)
    everything = run_sft.tokenize_conversation(tokenizer, messages, True, "row 0")
    assert everything["labels"] == everything["input_ids"]  # --train_on_prompt


def test_packed_batch_loss_equals_the_unpacked_mean(tiny_llama):
    """Three examples packed into one row (position ids restarting, no attention mask, no cache) give the model's
    loss of the same examples padded one per row (token-weighted mean): attention does not cross example
    boundaries. With the model's default `use_cache=True` transformers 5.24 builds a cache even in training and
    then ignores the packed position ids (an ordinary causal mask over the whole row): the loss differs, which is
    why run_sft's training forward passes `use_cache=False`."""
    from transformers import AutoModelForCausalLM

    tokenizer = word_tokenizer()
    model = AutoModelForCausalLM.from_pretrained(tiny_llama).eval()
    conversations = [[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
                     [{"role": "user", "content": "ok ?"}, {"role": "assistant", "content": "positive or negative"}],
                     [{"role": "user", "content": "this good"}, {"role": "assistant", "content": "positive"}]]
    examples = [run_sft.tokenize_conversation(tokenizer, c, True, f"row {i}") for i, c in enumerate(conversations)]
    collate = run_sft.SFTCollator(tokenizer.pad_token_id)
    packed = run_sft.pack_examples(examples, max_seq_length=64)
    assert len(packed) == 1 and packed[0]["position_ids"][:3] == [0, 1, 2]
    with torch.no_grad():
        packed_loss = model(**collate(packed), use_cache=False).loss
        unpacked = collate(examples)
        logits = model(input_ids=unpacked["input_ids"], attention_mask=unpacked["attention_mask"]).logits
    losses = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), unpacked["labels"][:, 1:],
                                               ignore_index=-100, reduction="sum")
    count = (unpacked["labels"][:, 1:] != -100).sum()
    assert torch.allclose(packed_loss, losses / count, atol=1e-5), (packed_loss, losses / count)
    with torch.no_grad():
        with_cache = model.train()(**collate(packed)).loss  # the default use_cache=True, in training mode
    assert not torch.allclose(with_cache, losses / count, atol=1e-3)


def test_pack_examples_keeps_examples_whole_and_in_order():
    examples = [{"input_ids": [1] * n, "labels": [1] * n} for n in (3, 4, 2, 5)]
    rows = run_sft.pack_examples(examples, max_seq_length=7)
    assert [len(r["input_ids"]) for r in rows] == [7, 7]  # 3 + 4, then 2 + 5
    assert rows[0]["position_ids"] == [0, 1, 2, 0, 1, 2, 3]
    assert rows[0]["labels"] == [-100, 1, 1, -100, 1, 1, 1]  # nothing in the row predicts an example's first token


@pytest.mark.parametrize("row,message", [
    ({"messages": [{"role": "robot", "content": "x"}]}, r"row 3: 'messages'\[0\] has role 'robot'; expected one of"),
    ({"messages": [{"role": "user", "content": "x"}]}, "row 3: the conversation has no assistant turn"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": " "}]},
     "row 3: an assistant turn is empty"),
    ({"messages": [{"role": "user", "content": 5}]}, r"row 3: 'messages'\[0\]\['content'\] is a int"),
    ({"messages": "hello"}, "row 3: 'messages' holds str, expected a non-empty list"),
])
def test_bad_conversations_name_the_row_and_field(row, message):
    with pytest.raises(ValueError, match=message):
        run_sft.to_conversation(row, args_for(), "messages", "train.jsonl (train), row 3")


def test_prompt_completion_and_template_rows():
    args = args_for(system_prompt="be brief")
    assert run_sft.to_conversation({"prompt": "hi", "completion": "hello"}, args, "prompt_completion", "r") == [
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"}]
    args = args_for(prompt_template="Summarize.\n\n{dialogue}", completion_column="summary")
    assert run_sft.data_format(args, ["dialogue", "summary"], "f") == "template"
    assert run_sft.to_conversation({"dialogue": "A: hi", "summary": "A greets."}, args, "template", "r")[0] == {
        "role": "user", "content": "Summarize.\n\nA: hi"}
    with pytest.raises(ValueError, match=r"row 7: 'summary' is empty; an example needs an answer"):
        run_sft.to_conversation({"dialogue": "A: hi", "summary": ""}, args, "template", "row 7")
    with pytest.raises(ValueError, match=r"name the column\(s\) \['dialog'\], not in the file's columns"):
        run_sft.data_format(args_for(prompt_template="{dialog}", completion_column="summary"),
                            ["dialogue", "summary"], "f")
    with pytest.raises(ValueError, match="found the columns \\['text'\\]; expected a 'messages' column"):
        run_sft.data_format(args_for(), ["text"], "f")


def test_refusals_before_training(tmp_path, tiny_llama, chat_data, capsys):
    """No chat template, and every example longer than --max_seq_length, are refused before training."""
    from transformers import AutoTokenizer

    bare = tmp_path / "bare"
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    tokenizer.chat_template = None
    tokenizer.save_pretrained(bare)
    common = ["--model_name_or_path", str(tiny_llama), "--train_file", str(chat_data["train"]),
              "--validation_file", str(chat_data["validation"]), "--output_dir", str(tmp_path / "out")]
    with pytest.raises(ValueError, match="has no chat template; give one with --chat_template FILE"):
        run_sft.main([*common, "--tokenizer_name", str(bare)])
    with pytest.raises(ValueError, match="all 240 examples are longer than --max_seq_length 8 tokens"):
        run_sft.main([*common, "--max_seq_length", "8"])
    assert not (tmp_path / "out" / "all_results.json").exists()


def sft_args(data, out, *extra):
    return ["--train_file", data["train"], "--validation_file", data["validation"], "--learning_rate", "1e-2",
            "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "8", "--num_train_epochs", "6",
            "--num_eval_samples", "40", "--max_new_tokens", "3", "--seed", "0", "--output_dir", out, *extra]


def test_learns_to_answer_and_writes_generations(tmp_path, tiny_llama, chat_data):
    """1 process, packed: the assistant-token perplexity falls from the untrained model's, the greedy answers are
    right (ROUGE-1 = accuracy for one-word answers), eval_generations.jsonl holds them."""
    before = read_results_of(launch("run_sft.py", ["--model_name_or_path", tiny_llama, "--max_train_steps", "0",
                                                   *sft_args(chat_data, tmp_path / "before")]), tmp_path / "before")
    launch("run_sft.py", ["--model_name_or_path", tiny_llama, "--packing", *sft_args(chat_data, tmp_path / "out")])
    results = read_results(tmp_path / "out")
    assert results["eval_perplexity"] < 2.0 < before["eval_perplexity"]
    assert results["eval_generation_rouge1"] >= 90 > before["eval_generation_rouge1"]
    assert results["train_packed_rows"] < 240 and results["packing"] is True
    lines = [json.loads(line) for line in (tmp_path / "out" / "eval_generations.jsonl").read_text().splitlines()]
    assert len(lines) == 40 and lines[0]["prompt"].endswith("<|im_start|>assistant\n")
    assert sum(line["generated"] == line["reference"] for line in lines) >= 36
    # How varied the answers are (issue 37 kind 6), by definition from the written file.
    answers = [line["generated"] for line in lines]
    assert results["eval_distinct_generations"] == len(set(answers)) > 1
    assert results["eval_most_common_generation_share"] == max(map(answers.count, answers)) / len(answers)
    assert before["eval_distinct_generations"] > 1  # the untrained model's 40 answers: 7 distinct, measured


def read_results_of(_result, out):
    return read_results(out)


@pytest.mark.slow  # a 2-process launch (~1 min); make test keeps the 1-process learning run
def test_two_processes_with_lora_learn_and_agree_on_generations(tmp_path, tiny_llama, chat_data):
    launch("run_sft.py", ["--model_name_or_path", tiny_llama, "--use_peft", "--lora_r", "8",
                          "--lora_target_modules", "all-linear", *sft_args(chat_data, tmp_path / "out")],
           num_processes=2)
    results = read_results(tmp_path / "out")
    assert results["eval_generation_rouge1"] >= 90
    assert (tmp_path / "out" / "adapter_model.safetensors").is_file()
    assert results["trainable_parameters"] < results["total_parameters"] / 2


# ----- break-test findings (2026-12-03): each was a crash after training, a traceback, or silent; now refused
def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def chat(user, answer):
    return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]}


@pytest.mark.parametrize("bad_row,extra,message", [
    ({"messages": [{"role": "system", "content": "be brief"}, {"role": "assistant", "content": "ok"}]}, [],
     r"validation.jsonl \(validation\), row 1: no user turn before the last assistant turn"),
    ({"messages": [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "hi"}]}, [],
     r"row 1: no user turn before the last assistant turn"),
    (chat("hi", "ok"), ["--max_new_tokens", "127"], r"row 0: its prompt \(\d+ tokens\) \+ --max_new_tokens 127 "
                                                    r"exceed the model's maximum length \(128\)"),
])
def test_validation_rows_that_generation_would_fail_on_are_refused_before_training(tmp_path, tiny_llama, chat_data,
                                                                                   bad_row, extra, message):
    """Found by the break test: these validation rows trained, then crashed in the generation after the epoch
    (IndexError, "Cannot apply chat template to an empty conversation", position embeddings) and lost the model."""
    validation = write_jsonl(tmp_path / "validation.jsonl", [chat("hi", "ok"), bad_row])
    with pytest.raises(ValueError, match=message):
        run_sft.main(["--model_name_or_path", str(tiny_llama), "--train_file", str(chat_data["train"]),
                      "--validation_file", str(validation), "--output_dir", str(tmp_path / "out"), *extra])
    assert not (tmp_path / "out" / "all_results.json").exists()


def test_chat_template_problems_are_refused_naming_the_flag_or_row(tmp_path, tiny_llama, chat_data):
    common = ["--model_name_or_path", str(tiny_llama), "--train_file", str(chat_data["train"]),
              "--validation_file", str(chat_data["validation"]), "--output_dir", str(tmp_path / "out")]
    templates = {"constant.jinja": "hello", "broken.jinja": "{% for m in messages %}{{ m['content'] }",
                 "empty.jinja": "  \n"}
    for name, text in templates.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "latin1.jinja").write_bytes(b"caf\xe9 {{ messages }}")
    (tmp_path / "folder.jinja").mkdir()
    for name, message in [("constant.jinja", r"train\), row 0: no token of the rendered conversation was written by "
                                             "the assistant"),
                          ("broken.jinja", r"row 0: the chat template .* fails on this conversation: "
                                           "TemplateSyntaxError"),
                          ("empty.jinja", "empty.jinja: the file is empty"),
                          ("latin1.jinja", r"^--chat_template .*latin1.jinja: not UTF-8 \(invalid continuation byte "
                                           r"at byte 3\); save the file as UTF-8")]:
        with pytest.raises(ValueError, match=message):
            run_sft.main([*common, "--chat_template", str(tmp_path / name)])
    with pytest.raises(SystemExit):
        run_sft.main([*common, "--chat_template", str(tmp_path / "folder.jinja")])


def test_tokenizer_without_pad_or_eos_is_refused(tmp_path, tiny_llama, chat_data):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    tokenizer.pad_token, tokenizer.eos_token = None, None
    tokenizer.save_pretrained(tmp_path / "tok")
    with pytest.raises(ValueError, match="has neither a pad nor an end-of-sequence token"):
        run_sft.main(["--model_name_or_path", str(tiny_llama), "--tokenizer_name", str(tmp_path / "tok"),
                      "--train_file", str(chat_data["train"]), "--output_dir", str(tmp_path / "out")])


def test_prompt_template_rows_that_cannot_be_formatted():
    args = args_for(prompt_template="Classify: {text:d}", completion_column="label")
    with pytest.raises(ValueError, match=r"row 4: --prompt_template 'Classify: \{text:d\}' cannot format this row "
                                         r"\(ValueError: Unknown format code 'd'"):
        run_sft.to_conversation({"text": "a b", "label": "x"}, args, "template", "f, row 4")
    with pytest.raises(ValueError, match=r"row 2: the --prompt_template column\(s\) \['text'\] are empty \(null\)"):
        run_sft.to_conversation({"text": None, "label": "x"}, args_for(prompt_template="{text}",
                                                                       completion_column="label"), "template",
                                "f, row 2")
    with pytest.raises(ValueError, match="uses the answer column 'label'"):
        run_sft.data_format(args_for(prompt_template="{text} -> {label}", completion_column="label"),
                            ["text", "label"], "f")


def test_row_numbers_count_from_the_file_when_validation_is_held_out(tmp_path, tiny_llama):
    """With --validation_split_percentage the training split starts after the held-out rows; errors give the
    file's row, not the split's."""
    rows = [chat("hi", "ok") for _ in range(9)] + [chat("hi", " ")]
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    with pytest.raises(ValueError, match=r"train.jsonl \(train\), row 9: an assistant turn is empty"):
        run_sft.main(["--model_name_or_path", str(tiny_llama), "--train_file", str(train),
                      "--validation_split_percentage", "20", "--output_dir", str(tmp_path / "out")])


def test_padding_multiple_never_pads_past_the_maximum_length():
    collate = run_sft.SFTCollator(0, pad_to_multiple_of=32, max_length=48)
    batch = collate([{"input_ids": [1] * 40, "labels": [1] * 40}])
    assert batch["input_ids"].shape == (1, 48)  # 64 would run past the model's 48 positions
    assert run_sft.SFTCollator(0, 32, 128)([{"input_ids": [1] * 40, "labels": [1] * 40}])["input_ids"].shape == (1, 64)


def test_evaluate_scores_exactly_the_assistant_tokens(tiny_llama):
    """evaluate() (which casts only the scored positions to float32, to fit a 49k-token vocabulary in memory)
    gives the token-weighted mean of the model's own per-example losses over the assistant tokens."""
    from accelerate import Accelerator
    from torch.utils.data import DataLoader
    from transformers import AutoModelForCausalLM

    tokenizer = word_tokenizer()
    model = AutoModelForCausalLM.from_pretrained(tiny_llama).eval()
    conversations = [[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
                     [{"role": "user", "content": "ok ?"}, {"role": "assistant", "content": "positive or negative"}],
                     [{"role": "user", "content": "this good"}, {"role": "assistant", "content": "positive"}]]
    examples = [run_sft.tokenize_conversation(tokenizer, c, False, "r") for c in conversations]
    accelerator = Accelerator(cpu=True)
    dataloader = accelerator.prepare(DataLoader(examples, batch_size=2, collate_fn=run_sft.SFTCollator(0)))
    result = run_sft.evaluate(model, dataloader, accelerator)
    total, tokens = 0.0, 0
    with torch.no_grad():
        for example in examples:
            ids, labels = torch.tensor([example["input_ids"]]), torch.tensor([example["labels"]])
            n = int((labels[:, 1:] != -100).sum())
            total += model(input_ids=ids, labels=labels).loss.item() * n
            tokens += n
    assert result["tokens"] == tokens == 3 + 5 + 3  # each answer's words, <|im_end|> and "\n"
    assert result["loss"] == pytest.approx(total / tokens, abs=1e-5)


@pytest.mark.parametrize("use_peft", [False, True])
def test_a_tokenizer_larger_than_the_embedding_matrix_gets_the_matrix_resized(tmp_path, tiny_llama, caplog,
                                                                              use_peft):
    """Break-test: a --tokenizer_name with more tokens than the model's embedding rows stopped the first step with
    "IndexError: index out of range in self". The matrix is resized (as run_clm.py), the resize logged (with
    --use_peft, a warning that LoRA leaves the new rows untrained), and a conversation holding the new tokens gets a
    finite loss and greedy answers; the tokenizer's token_type_ids (BERT-style; the break-test's tokenizer) do not
    reach `generate`, which refused them after training."""
    import logging

    from accelerate import Accelerator
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    rows = len(tokenizer)
    tokenizer.add_tokens(["zebra", "yak"])
    tokenizer.save_pretrained(tmp_path / "tok")
    config_file = tmp_path / "tok" / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config["model_input_names"] = ["input_ids", "token_type_ids", "attention_mask"]  # as BERT's
    config_file.write_text(json.dumps(config))
    accelerator = Accelerator(cpu=True)  # run_sft logs through accelerate's logger
    args = args_for(model_name_or_path=str(tiny_llama), tokenizer_name=str(tmp_path / "tok"), use_peft=use_peft)
    with caplog.at_level(logging.INFO):
        tokenizer, model = run_sft.load_model_and_tokenizer(args)
    assert len(tokenizer) == rows + 2
    assert model.get_input_embeddings().weight.shape[0] == model.get_output_embeddings().weight.shape[0] == rows + 2
    assert (f"--tokenizer_name {tmp_path / 'tok'} has {rows + 2} tokens, more than the {rows} rows of the embedding "
            f"matrix of --model_name_or_path {tiny_llama}: resized to {rows + 2} rows") in caplog.text
    warned = "LoRA freezes the embedding matrix, so the 2 new rows keep their initial values" in caplog.text
    assert warned == use_peft
    conversation = [{"role": "user", "content": "Is this zebra ?"}, {"role": "assistant", "content": "yak"}]
    example = run_sft.tokenize_conversation(tokenizer, conversation, False, "row 0")
    assert tokenizer.convert_tokens_to_ids("yak") == rows + 1 and rows + 1 in example["input_ids"]
    with torch.no_grad():
        loss = model(input_ids=torch.tensor([example["input_ids"]]), labels=torch.tensor([example["labels"]])).loss
    assert torch.isfinite(loss)
    assert "token_type_ids" in tokenizer("zebra")
    prompts, references = run_sft.generation_prompts([conversation, conversation], tokenizer)
    assert references == ["yak", "yak"]
    answers = run_sft.generate_answers(model, tokenizer, prompts, accelerator, max_new_tokens=2, batch_size=2)
    assert len(answers) == 2 and answers[0] == answers[1]  # greedy: the same prompt, the same answer

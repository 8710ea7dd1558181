"""Supervised fine-tuning (instruction tuning) of a causal language model on conversations with 🤗 Accelerate: the
tokenizer's chat template, the loss on the assistant's tokens only, optional packing, LoRA through `--use_peft`.

Data: .jsonl, .json or .csv files (or a Hub dataset) in one of three shapes, detected per file:
- conversational: a `--messages_column` (default `messages`) holding a list of {"role", "content"} with roles
  system / user / assistant, any number of turns;
- prompt-completion: `--prompt_column` and `--completion_column` (default `prompt`, `completion`);
- any other table through `--prompt_template`, a Python format string over its columns (e.g.
  "Summarize the dialogue.\\n\\n{dialogue}"), with `--completion_column` naming the answer (e.g. `summary`).
Every example becomes a conversation (with `--system_prompt` first, when given), rendered by the tokenizer's
chat template (or `--chat_template FILE`). Labels are -100 on every token the assistant did not write (system,
user, template markup), unless `--train_on_prompt`. Metric: loss and perplexity over the assistant tokens of the
validation set after every epoch, and for the first `--num_eval_samples` validation conversations a greedy
answer to the last user turn, scored against the reference answer (ROUGE, or SQuAD exact match / F1 with
`--generation_metric squad`), written to `eval_generations.jsonl`, beside the lead-3 baseline of the prompt.

    accelerate launch examples/run_sft.py --model_name_or_path outputs/smollm2-135m-instruct \\
        --train_file train.jsonl --validation_file dev.jsonl --max_seq_length 512 --use_peft \\
        --learning_rate 2e-4 --num_train_epochs 1 --output_dir outputs/sft
"""

import argparse
import json
import os
from pathlib import Path

import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.logging import get_logger
from accelerate.utils import ProjectConfiguration, gather_object
from transformers import AutoModelForCausalLM, AutoTokenizer

from common.accumulation import label_tokens
from common.adapters import apply_peft
from common.args import (
    add_common_args,
    capped_length,
    check_tokenizer_has_vocabulary,
    fit_embeddings_to_tokenizer,
    model_max_length,
    non_negative_int,
    positive_int,
    validate_common_args,
)
from common.attention import set_attn_implementation
from common.batch_size import train_with_batch_size_search
from common.data import load_data_files, read_flag_file
from common.dataloaders import build_eval_dataloader, build_train_dataloader
from common.errors import run_script
from common.fast_dropout import enable_fast_dropout
from common.gradient_checkpointing import enable_gradient_checkpointing
from common.launch import setup_run
from common.metrics import load_metric
from common.optimization import build_lr_scheduler, build_optimizer, optimizer_options, plan_training_steps
from common.preemption import sigterm_checkpointing
from common.reporting import progress_bar
from common.run import TrainingRun
from common.tasks.lm_data import percentage, split_validation, token_loss_sums
from common.tasks.rouge import compute_rouge, lead3_rouge
from common.tasks.seq2seq import generation_diversity
from common.tracking import init_trackers, parse_report_to

logger = get_logger(__name__)

ROLES = ("system", "user", "assistant")
DEFAULT_MAX_SEQ_LENGTH = 1024
GENERATIONS_FILE = "eval_generations.jsonl"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, file_extensions=("jsonl", "json", "csv"))
    task = parser.add_argument_group("supervised fine-tuning")
    task.add_argument("--messages_column", default="messages",
                      help="Column of conversational data: a list of {'role', 'content'} messages.")
    task.add_argument("--prompt_column", default="prompt", help="Prompt column of prompt-completion data.")
    task.add_argument("--completion_column", default="completion",
                      help="Completion (answer) column of prompt-completion data and of --prompt_template data.")
    task.add_argument("--prompt_template", default=None,
                      help="Build the user turn from any columns: a Python format string such as "
                      "'Summarize the dialogue.\\n\\n{dialogue}'; the answer is --completion_column.")
    task.add_argument("--system_prompt", default=None, help="A system message put before every conversation.")
    task.add_argument("--chat_template", default=None, metavar="FILE",
                      help="A Jinja chat template file, for a tokenizer without one (or to replace its own).")
    task.add_argument("--max_seq_length", type=positive_int, default=None,
                      help=f"Tokens per example (per packed row with --packing); longer examples are dropped and "
                      f"counted. Default: the model's maximum, at most {DEFAULT_MAX_SEQ_LENGTH}.")
    task.add_argument("--train_on_prompt", action="store_true",
                      help="Compute the loss on every token, not only on the assistant's.")
    task.add_argument("--packing", action="store_true",
                      help="Pack several training examples into one --max_seq_length row; attention stays within "
                      "each example (position ids restart per example).")
    task.add_argument("--validation_split_percentage", type=percentage, default=5,
                      help="Without a validation file, hold out this percentage of the training rows (the first).")
    task.add_argument("--num_eval_samples", type=non_negative_int, default=16,
                      help="Validation conversations answered by greedy generation after every epoch (0: none).")
    task.add_argument("--max_new_tokens", type=positive_int, default=64, help="Tokens generated per answer.")
    task.add_argument("--generation_metric", choices=["rouge", "squad"], default="rouge",
                      help="Score of the generated answers against the references.")
    args = parser.parse_args(argv)
    if args.model_name_or_path is None:
        parser.error("--model_name_or_path is required: supervised fine-tuning starts from a pretrained model.")
    if args.test_file is not None:
        parser.error("--test_file is not used by run_sft.py; evaluation uses --validation_file.")
    if args.chat_template is not None and not os.path.isfile(args.chat_template):
        kind = "a folder" if os.path.isdir(args.chat_template) else "no such file"
        parser.error(f"--chat_template {args.chat_template}: {kind}; expected a Jinja template file")
    return args


def load_raw_datasets(args):
    """The Hub dataset or the local files, with a validation split (the first --validation_split_percentage %
    of the training rows when there is no validation file).

    Returns:
        (`datasets.DatasetDict` with "train" (unless only --validation_file is given) and "validation",
        {split: source name for error messages}, {split: file row of the split's first row}).
    """
    import datasets

    if args.dataset_name is not None:
        raw = datasets.load_dataset(args.dataset_name, args.dataset_config_name)
        sources = {split: args.dataset_name for split in raw}
    else:
        raw = load_data_files({"train": args.train_file, "validation": args.validation_file})
        sources = {"train": args.train_file, "validation": args.validation_file}
    first_rows = {split: 0 for split in raw}  # the file row of each split's first row, for error messages
    if "validation" not in raw:
        raw["train"], raw["validation"] = split_validation(raw["train"], args.validation_split_percentage,
                                                           sources["train"])
        sources["validation"] = sources["train"]
        first_rows.update(validation=0, train=len(raw["validation"]))
    return raw, sources, first_rows


def data_format(args, columns, source):
    """Which shape a split has: "messages", "prompt_completion" or "template" (see the module docstring).

    Raises:
        ValueError: naming the file, its columns and the flags, when none fits.
    """
    if args.prompt_template is not None:
        fields = template_fields(args.prompt_template)
        if args.completion_column in fields:
            raise ValueError(f"--prompt_template {args.prompt_template!r} uses the answer column "
                             f"'{args.completion_column}' (--completion_column): the prompt would hold its answer.")
        missing = [f for f in fields + [args.completion_column] if f not in columns]
        if missing:
            raise ValueError(f"{source}: --prompt_template / --completion_column name the column(s) {missing}, not "
                             f"in the file's columns {columns}.")
        return "template"
    if args.messages_column in columns:
        return "messages"
    if args.prompt_column in columns and args.completion_column in columns:
        return "prompt_completion"
    raise ValueError(f"{source}: found the columns {columns}; expected a '{args.messages_column}' column "
                     f"(--messages_column), or '{args.prompt_column}' and '{args.completion_column}' "
                     "(--prompt_column, --completion_column), or give --prompt_template.")


def template_fields(template):
    """The column names a --prompt_template uses ({dialogue} -> "dialogue").

    Raises:
        ValueError: naming --prompt_template when it is not a valid format string or uses no column.
    """
    import string

    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as error:
        raise ValueError(f"--prompt_template {template!r}: not a format string ({error}); write columns as "
                         "{column} and literal braces as {{ }}.") from None
    if not fields or any(not f.isidentifier() for f in fields):
        raise ValueError(f"--prompt_template {template!r}: expected one or more {{column}} fields, found {fields}.")
    return fields


def to_conversation(example, args, shape, where):
    """One row as a list of {"role", "content"} messages (with --system_prompt first when given).

    Raises:
        ValueError: naming `where` (file and row) and the field: a message that is not a {"role", "content"}
            mapping, an unknown role, a content that is not a string, no assistant turn, an empty answer.
    """
    if shape == "messages":
        messages = example[args.messages_column]
        if not isinstance(messages, list) or not messages:
            raise ValueError(f"{where}: '{args.messages_column}' holds {type(messages).__name__}, expected a "
                             "non-empty list of {'role', 'content'} messages.")
        for turn, message in enumerate(messages):
            if not isinstance(message, dict) or "role" not in message or "content" not in message:
                raise ValueError(f"{where}: '{args.messages_column}'[{turn}] is {message!r}, expected "
                                 "{'role': ..., 'content': ...}.")
            if message["role"] not in ROLES:
                raise ValueError(f"{where}: '{args.messages_column}'[{turn}] has role {message['role']!r}; "
                                 f"expected one of {list(ROLES)}.")
            if not isinstance(message["content"], str):
                raise ValueError(f"{where}: '{args.messages_column}'[{turn}]['content'] is a "
                                 f"{type(message['content']).__name__}, expected a string.")
        messages = [{"role": m["role"], "content": m["content"]} for m in messages]
        if not any(m["role"] == "assistant" for m in messages):
            raise ValueError(f"{where}: the conversation has no assistant turn, so nothing to learn from.")
        if any(m["role"] == "assistant" and not m["content"].strip() for m in messages):
            raise ValueError(f"{where}: an assistant turn is empty.")
    else:
        if shape == "template":
            missing = [f for f in template_fields(args.prompt_template) if example.get(f) is None]
            if missing:
                raise ValueError(f"{where}: the --prompt_template column(s) {missing} are empty (null).")
            try:
                prompt = args.prompt_template.format(**example)
            except (ValueError, TypeError, KeyError, IndexError) as error:
                raise ValueError(f"{where}: --prompt_template {args.prompt_template!r} cannot format this row "
                                 f"({type(error).__name__}: {error}).") from None
        else:
            prompt = example[args.prompt_column]
        completion = example[args.completion_column]
        for name, value in (("prompt", prompt), (args.completion_column, completion)):
            if not isinstance(value, str):
                raise ValueError(f"{where}: '{name}' is {type(value).__name__}, expected a string.")
        if not completion.strip():
            raise ValueError(f"{where}: '{args.completion_column}' is empty; an example needs an answer.")
        messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}]
    if args.system_prompt and messages[0]["role"] != "system":
        messages = [{"role": "system", "content": args.system_prompt}] + messages
    return messages


def render(tokenizer, messages, add_generation_prompt=False, where="a conversation"):
    """The chat template's text of `messages` (no tokenisation).

    Raises:
        ValueError: naming `where` and the template when it fails on them (a syntax error, an undefined name, its
            own `raise_exception`, e.g. "roles must alternate").
    """
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    except Exception as error:  # jinja2's TemplateError family, and transformers' ValueErrors about the input
        raise ValueError(f"{where}: the chat template (the tokenizer's, or --chat_template) fails on this "
                         f"conversation: {type(error).__name__}: {error}") from None


def assistant_spans(tokenizer, messages, where):
    """The rendered conversation and the character spans the assistant wrote.

    The template is rendered once per assistant turn i: the text up to that turn with the generation prompt
    (`<|im_start|>assistant\\n`) and the text through that turn; the turn's span is what lies between, so it holds
    the answer and its end-of-turn marker (`<|im_end|>`), which the model must learn to emit, and not the markup
    before it. This works for any template whose rendering of a conversation starts with the rendering of its
    first turns (checked; TRL's `{% generation %}` tags are not needed).

    Returns:
        (text, [(start, end), ...]).

    Raises:
        ValueError: naming `where` when the template renders a conversation not as an extension of its prefix.
    """
    text = render(tokenizer, messages, where=where)
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = render(tokenizer, messages[:i], add_generation_prompt=True, where=where) if i else ""
        through = render(tokenizer, messages[: i + 1], where=where)
        if not text.startswith(through) or not through.startswith(before):
            raise ValueError(f"{where}: the chat template does not render this conversation as an extension of its "
                             f"first {i} turn(s), so the assistant's tokens cannot be located; use another "
                             "--chat_template.")
        spans.append((len(before), len(through)))
    return text, spans


def tokenize_conversation(tokenizer, messages, train_on_prompt, where):
    """input_ids and labels of one conversation: labels copy input_ids on the tokens the assistant wrote (a token
    whose characters start inside an assistant span) and are -100 elsewhere, unless `train_on_prompt`.

    Returns:
        {"input_ids": list of ints, "labels": list of ints, same length}.
    """
    text, spans = assistant_spans(tokenizer, messages, where)
    # The template writes the special tokens itself (e.g. <bos>): the tokenizer must not add them again.
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = encoding["input_ids"]
    if train_on_prompt:
        labels = list(ids)
    else:
        labels = [token if any(start <= begin < end for start, end in spans) else -100
                  for token, (begin, _) in zip(ids, encoding["offset_mapping"])]
        if all(label == -100 for label in labels):
            raise ValueError(f"{where}: no token of the rendered conversation was written by the assistant, so none "
                             "carries loss: the chat template drops the assistant's text; use another "
                             "--chat_template.")
    return {"input_ids": ids, "labels": labels}


def pack_examples(examples, max_seq_length):
    """Packs tokenised examples, in order, into rows of at most `max_seq_length` tokens (an example goes into
    the current row when it fits, else starts a new one; none is split).

    Attention across examples is prevented with position ids that restart at 0 for every example and no
    attention mask: transformers' masking (`masking_utils.find_packed_sequence_indices`) then builds a
    block-diagonal causal mask from them, for eager, SDPA and flash attention alike, with no 4-D mask to build
    here -- but only when the forward runs without a cache (`use_cache=False`; transformers 5.24 otherwise
    builds one even in training and falls back to one causal mask over the whole row). Each example's first label
    is -100: nothing before it in its row may predict it.

    Args:
        examples: list of {"input_ids", "labels"}.

    Returns:
        list of {"input_ids", "labels", "position_ids"} rows.
    """
    rows, current = [], None
    for example in examples:
        n = len(example["input_ids"])
        if current is None or len(current["input_ids"]) + n > max_seq_length:
            current = {"input_ids": [], "labels": [], "position_ids": []}
            rows.append(current)
        current["input_ids"] += example["input_ids"]
        current["labels"] += [-100] + example["labels"][1:]
        current["position_ids"] += list(range(n))
    return rows


class SFTCollator:
    """Pads a batch on the right: input_ids with the pad token, labels with -100. Unpacked rows get an attention
    mask; packed rows (with position_ids) get none and their padding is one more "example" (positions from 0),
    so that transformers' block-diagonal mask keeps it apart (see `pack_examples`)."""

    def __init__(self, pad_token_id, pad_to_multiple_of=None, max_length=None):
        self.pad_token_id = pad_token_id
        self.pad_to_multiple_of = pad_to_multiple_of
        self.max_length = max_length  # --pad_to_multiple_of never pads beyond it (the model's positions)

    def __call__(self, rows):
        longest = max(len(r["input_ids"]) for r in rows)
        length = longest
        if self.pad_to_multiple_of:
            length = -(-length // self.pad_to_multiple_of) * self.pad_to_multiple_of
            length = max(longest, min(length, self.max_length or length))
        batch = {"input_ids": [], "labels": []}
        packed = "position_ids" in rows[0]
        batch["position_ids" if packed else "attention_mask"] = []
        for r in rows:
            pad = length - len(r["input_ids"])
            batch["input_ids"].append(list(r["input_ids"]) + [self.pad_token_id] * pad)
            batch["labels"].append(list(r["labels"]) + [-100] * pad)
            if packed:
                batch["position_ids"].append(list(r["position_ids"]) + list(range(pad)))
            else:
                batch["attention_mask"].append([1] * len(r["input_ids"]) + [0] * pad)
        return {k: torch.tensor(v, dtype=torch.long) for k, v in batch.items()}


def check_generation_prompt(args, tokenizer, messages, model_max, where):
    """Checks before training that a validation conversation can be answered by generation after each epoch: a
    user turn before its last assistant turn, and its prompt plus --max_new_tokens within the model's maximum
    length (beyond it the position embeddings fail inside `generate`, after training).

    Raises:
        ValueError: naming `where`, and --max_new_tokens with the token counts.
    """
    last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    if not any(m["role"] == "user" for m in messages[:last]):
        raise ValueError(f"{where}: no user turn before the last assistant turn, so there is no question to answer "
                         "by generation (--num_eval_samples); put one first, or --num_eval_samples 0.")
    prompt_tokens = len(tokenizer(render(tokenizer, messages[:last], add_generation_prompt=True, where=where),
                                  add_special_tokens=False)["input_ids"])
    if model_max is not None and prompt_tokens + args.max_new_tokens > model_max:
        raise ValueError(f"{where}: its prompt ({prompt_tokens} tokens) + --max_new_tokens {args.max_new_tokens} "
                         f"exceed the model's maximum length ({model_max}); lower --max_new_tokens or "
                         "--num_eval_samples.")


def preprocess(args, raw_datasets, sources, tokenizer, max_seq_length, accelerator, model_max=None,
               first_rows=None):
    """Conversations -> tokenised examples (train packed with --packing); too-long examples dropped and counted;
    the first --num_eval_samples validation conversations checked for generation (`check_generation_prompt`).

    Returns:
        (train examples or None, eval examples, eval conversations (for generation), dropped counts per split).

    Raises:
        ValueError: from `to_conversation` / `assistant_spans` (file, row, field); naming --max_seq_length when
            every example of a split is longer.
    """
    processed, conversations, dropped = {}, {}, {}
    with accelerator.main_process_first():
        for split, dataset in raw_datasets.items():
            shape = data_format(args, dataset.column_names, sources[split])
            limit = args.max_train_samples if split == "train" else args.max_eval_samples
            rows = dataset.select(range(min(limit, len(dataset)))) if limit is not None else dataset
            examples, kept, too_long = [], [], 0
            for index, row in enumerate(rows):
                where = f"{sources[split]} ({split}), row {index + (first_rows or {}).get(split, 0)}"
                messages = to_conversation(row, args, shape, where)
                example = tokenize_conversation(tokenizer, messages, args.train_on_prompt, where)
                if len(example["input_ids"]) > max_seq_length:
                    too_long += 1
                    continue
                if split == "validation" and len(kept) < args.num_eval_samples:
                    check_generation_prompt(args, tokenizer, messages, model_max, where)
                examples.append(example)
                kept.append(messages)
            if not examples:
                raise ValueError(f"{sources[split]} ({split}): all {len(rows)} examples are longer than "
                                 f"--max_seq_length {max_seq_length} tokens; raise it.")
            if too_long:
                logger.warning(f"{sources[split]} ({split}): {too_long} of {len(rows)} examples are longer than "
                               f"--max_seq_length {max_seq_length} tokens and are left out (counted in "
                               f"all_results.json as {split}_examples_too_long).")
            if split == "train" and args.packing:
                examples = pack_examples(examples, max_seq_length)
            processed[split], conversations[split], dropped[f"{split}_examples_too_long"] = examples, kept, too_long
    return processed.get("train"), processed["validation"], conversations["validation"], dropped


def evaluate(model, dataloader, accelerator):
    """Token-weighted loss and perplexity over the assistant tokens of the validation set (labels != -100):
    per-sequence loss sums and token counts gathered with `gather_for_metrics` and totalled by the perplexity
    module (`common/metrics/perplexity`: exp(sum of token losses / tokens), Jelinek et al. 1977), so the
    result does not depend on batch size or process count.

    Returns:
        {"loss", "perplexity", "tokens"}.
    """
    metric = load_metric("perplexity", keep_in_memory=True)
    model.eval()
    for batch in progress_bar(dataloader, accelerator, "evaluate"):
        with torch.no_grad():
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        # Only the positions that predict an assistant token are cast to float32 and scored (common/tasks/lm_data.py).
        sums, counts = token_loss_sums(logits, batch["labels"], shift=True)
        sums, counts = accelerator.gather_for_metrics((sums, counts))
        metric.add_batch(loss_sums=sums.double().cpu().numpy(), token_counts=counts.cpu().numpy())
    return metric.compute()


def generation_prompts(conversations, tokenizer):
    """For each conversation: the template's text up to its last assistant turn, with the generation prompt,
    and that turn's content as the reference."""
    prompts, references = [], []
    for messages in conversations:
        last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
        prompts.append(render(tokenizer, messages[:last], add_generation_prompt=True))
        references.append(messages[last]["content"])
    return prompts, references


def generate_answers(model, tokenizer, prompts, accelerator, max_new_tokens, batch_size):
    """Greedy answers to `prompts`, each process answering its share (`split_between_processes`), gathered in
    prompt order on every process (`gather_object`). Left padding, so that every row's answer starts at the same
    position; under FSDP / ZeRO-3 every process runs the same number of decoding steps (`synced_gpus`).

    Returns:
        list of answer strings (special tokens removed), one per prompt.
    """
    model.eval()
    unwrapped = accelerator.unwrap_model(model)
    sharded = accelerator.distributed_type.name == "FSDP" or (
        accelerator.distributed_type.name == "DEEPSPEED" and accelerator.state.deepspeed_plugin.zero_stage == 3)
    padding_side, tokenizer.padding_side = tokenizer.padding_side, "left"
    answers = []
    with accelerator.split_between_processes(list(enumerate(prompts))) as share:
        for start in range(0, len(share), batch_size):
            chunk = share[start:start + batch_size]
            # no token_type_ids (a BERT-style tokenizer's): a causal LM's generate refuses them
            batch = tokenizer([p for _, p in chunk], add_special_tokens=False, padding=True,
                              return_token_type_ids=False, return_tensors="pt").to(accelerator.device)
            with torch.no_grad():
                output = unwrapped.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False,
                                            pad_token_id=tokenizer.pad_token_id, synced_gpus=sharded)
            texts = tokenizer.batch_decode(output[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
            answers += [(i, t.strip()) for (i, _), t in zip(chunk, texts)]
    tokenizer.padding_side = padding_side
    return [text for _, text in sorted(gather_object(answers))]


def score_answers(answers, references, metric_name):
    """ROUGE-1/2/L/Lsum (`common.tasks.rouge.compute_rouge`) or SQuAD exact match / F1 (`common/metrics/squad`)
    of the answers against the references, 0-100."""
    if metric_name == "rouge":
        return compute_rouge(answers, references)
    squad = load_metric("squad", keep_in_memory=True)
    return squad.compute(predictions=[{"id": str(i), "prediction_text": a} for i, a in enumerate(answers)],
                         references=[{"id": str(i), "answers": {"text": [r], "answer_start": [0]}}
                                     for i, r in enumerate(references)])


def generation_eval(args, model, tokenizer, conversations, accelerator, epoch):
    """Answers the first --num_eval_samples validation conversations, scores them, and (main process) writes
    them to eval_generations.jsonl. Returns {"generation_<metric>": value, ..., "distinct_generations",
    "most_common_generation_share"} (`common.tasks.seq2seq.generation_diversity`, which warns when most answers are
    one text: a collapsed model scores near the baseline with one fixed answer); {} when --num_eval_samples 0."""
    if args.num_eval_samples == 0:
        return {}
    prompts, references = generation_prompts(conversations[: args.num_eval_samples], tokenizer)
    answers = generate_answers(model, tokenizer, prompts, accelerator, args.max_new_tokens,
                               args.per_device_eval_batch_size)
    scores = score_answers(answers, references, args.generation_metric)
    if accelerator.is_main_process:
        with open(Path(args.output_dir) / GENERATIONS_FILE, "w") as f:
            for prompt, answer, reference in zip(prompts, answers, references):
                f.write(json.dumps({"epoch": epoch, "prompt": prompt, "generated": answer,
                                    "reference": reference}) + "\n")
    return {**{f"generation_{k}": v for k, v in scores.items()}, **generation_diversity(answers, "answers")}


def prompt_baseline(args, conversations):
    """The trivial baseline of the generated answers: lead-3, the first three sentences of the text the answer is
    about (`common.tasks.rouge.lead3_rouge`): the template's first column with --prompt_template, else the last
    user turn. Only for ROUGE; {} otherwise."""
    if args.generation_metric != "rouge" or args.num_eval_samples == 0:
        return {}
    documents, references = [], []
    for messages in conversations[: args.num_eval_samples]:
        last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
        user = [m["content"] for m in messages[:last] if m["role"] == "user"][-1]
        if args.prompt_template:  # the first {field}'s text: what is left of the user turn after the fixed text
            head = args.prompt_template.split("{", 1)[0]
            user = user[len(head):] if user.startswith(head) else user
        documents.append(user)
        references.append(messages[last]["content"])
    # Named after the keys they stand beside (eval_generation_rouge1 <-> eval_baseline_generation_rouge1), so the
    # end-of-run table shows each baseline next to its metric.
    return {key.replace("eval_baseline_", "eval_baseline_generation_"): value
            for key, value in lead3_rouge(documents, references).items()}


def load_model_and_tokenizer(args):
    """The pretrained model (float32) and its tokenizer, with --chat_template applied and a pad token (the EOS
    token when the tokenizer has none: padded positions carry no loss and no attention). When the tokenizer has more
    tokens than the model's embedding matrix has rows, the matrix is resized to `len(tokenizer)` (as run_clm.py).

    Raises:
        ValueError: naming --chat_template when the tokenizer has no chat template and none is given.
    """
    common = {"trust_remote_code": args.trust_remote_code}
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer_name or args.model_name_or_path,
                                              use_fast=not args.use_slow_tokenizer, **common)
    check_tokenizer_has_vocabulary(tokenizer, args)  # not an empty one (a model folder without tokenizer files)
    if args.chat_template:
        tokenizer.chat_template = read_flag_file("--chat_template", args.chat_template)
        if not tokenizer.chat_template.strip():
            raise ValueError(f"--chat_template {args.chat_template}: the file is empty; expected a Jinja template.")
    if not tokenizer.chat_template:
        raise ValueError(f"The tokenizer of {args.tokenizer_name or args.model_name_or_path} has no chat template; "
                         "give one with --chat_template FILE (a Jinja template, e.g. ChatML).")
    if not tokenizer.is_fast:
        raise ValueError("--use_slow_tokenizer: run_sft.py needs a fast tokenizer (character offsets locate the "
                         "assistant's tokens).")
    if tokenizer.pad_token_id is None and tokenizer.eos_token_id is None:
        raise ValueError(f"The tokenizer of {args.tokenizer_name or args.model_name_or_path} has neither a pad nor an "
                         "end-of-sequence token: batches cannot be padded and answers cannot end; give it an "
                         "eos_token (tokenizer_config.json).")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path, dtype=torch.float32, **common)
    fit_embeddings_to_tokenizer(model, tokenizer, args, logger)  # more tokens than embedding rows: resized
    return tokenizer, model


def training_function(args):
    """Fine-tunes `--model_name_or_path` on the conversations, evaluating the assistant-token perplexity and the
    generated answers after every epoch; saves the model (or the LoRA adapter), tokenizer, `all_results.json`,
    `eval_history.jsonl` and `eval_generations.jsonl` in `--output_dir`.

    Returns:
        the `all_results.json` dict.
    """
    accelerator = Accelerator(
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        mixed_precision=args.mixed_precision,
        log_with=parse_report_to(args.report_to) if args.with_tracking else None,
        project_config=ProjectConfiguration(project_dir=args.output_dir, logging_dir=args.output_dir),
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True),
    )
    setup_run(accelerator, args, logger)  # process-group check, logging on the main process, seed

    raw_datasets, sources, first_rows = load_raw_datasets(args)
    if "train" not in raw_datasets and args.max_train_steps != 0:
        raise ValueError("No training data: give --train_file (or --max_train_steps 0 to only evaluate).")
    tokenizer, model = load_model_and_tokenizer(args)
    model_max = model_max_length(tokenizer, model.config)
    max_seq_length = (capped_length("--max_seq_length", args.max_seq_length, model_max, logger)
                      if args.max_seq_length else min(DEFAULT_MAX_SEQ_LENGTH, model_max or DEFAULT_MAX_SEQ_LENGTH))
    train_dataset, eval_dataset, eval_conversations, dropped = preprocess(
        args, raw_datasets, sources, tokenizer, max_seq_length, accelerator, model_max, first_rows)
    collator = SFTCollator(tokenizer.pad_token_id, args.pad_to_multiple_of, max_length=max_seq_length)
    eval_dataloader = build_eval_dataloader(args, eval_dataset, collator)
    train_dataloader = build_train_dataloader(args, train_dataset, collator, accelerator)
    plan = plan_training_steps(args, train_dataloader, accelerator)

    model = apply_peft(model, args, task_type="CAUSAL_LM", logger=logger)  # --use_peft (common/adapters.py)
    if args.attn_implementation:  # the attention kernel, e.g. eager for small heads under bf16 (common/attention.py)
        set_attn_implementation(model, args.attn_implementation, accelerator.device, logger)
    if args.fast_dropout:  # cheaper dropout masks on CPU (common/fast_dropout.py)
        enable_fast_dropout(model, args.attn_implementation)
    if args.gradient_checkpointing:  # activations recomputed in backward (common/gradient_checkpointing.py)
        enable_gradient_checkpointing(model, accelerator)
    optimizer = build_optimizer(model, args.learning_rate, args.weight_decay, **optimizer_options(args))
    lr_scheduler = build_lr_scheduler(
        optimizer, args.lr_scheduler_type, args.num_warmup_steps, plan.max_train_steps, accelerator
    )
    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler
    )
    init_trackers(accelerator, "sft_no_trainer", args)  # the run's flags; logged steps = optimizer steps
    # banner, counters, hooks; the loss is a mean over label tokens (common/accumulation.py)
    run = TrainingRun(accelerator, args, plan, train_dataloader, optimizer, logger,
                      loss_items=label_tokens(shift=1))
    # The evaluation of --eval_steps (inside the epoch) and of the best model (best/, early stopping)
    run.set_evaluation(model, lambda: {**evaluate(model, eval_dataloader, accelerator), **generation_eval(
        args, model, tokenizer, eval_conversations, accelerator, epoch)}, tokenizer, main_metric="loss")
    if (checkpoint := run.checkpoint_to_resume()) is not None:  # --resume_from_checkpoint
        accelerator.load_state(str(checkpoint))  # model (adapter included), optimizer, scheduler, RNG states
        run.resume_from(checkpoint)  # completed steps, the epoch and batches to skip, totals

    eval_metrics = None
    for epoch in range(run.starting_epoch, run.num_train_epochs):
        model.train()
        optimizer.train()  # schedule-free AdamW trains at its interpolated weights (no-op for AdamW)
        train_dataloader.set_epoch(epoch)  # an epoch's order depends on (seed, epoch) only
        skip = run.batches_to_skip if epoch == run.starting_epoch else 0  # resuming mid-epoch
        active_dataloader = accelerator.skip_first_batches(train_dataloader, skip) if skip else train_dataloader
        for batch in active_dataloader:
            with accelerator.accumulate(model):
                # The model's loss: mean cross-entropy over this batch's assistant tokens (labels != -100).
                # use_cache=False: with a cache, transformers ignores packed rows' restarting position ids and
                # lets examples attend to each other (tests/examples/test_run_sft.py shows it).
                loss = model(**batch, use_cache=False).loss
                # Summed over this micro-batch's label tokens here, divided by all the label tokens of the accumulation
                # window (all processes) below: each step's gradient is that of the window's mean loss per label token.
                accelerator.backward(run.summed_loss(loss, batch))
                if accelerator.sync_gradients:  # once per optimizer step, on the whole window's gradients:
                    run.normalize_gradients(model)  # / the window's label tokens, summed over processes
                    if run.measures_grad_norm:  # --max_grad_norm > 0, or --with_tracking (grad_norm is logged)
                        run.grad_norm = accelerator.clip_grad_norm_(model.parameters(), run.max_grad_norm)  # clipped
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
            run.record_micro_batch(batch, loss)
            if accelerator.sync_gradients and run.after_optimizer_step(epoch):  # progress, log, step_N, SIGTERM
                break
        if run.evaluates_after_epoch(epoch):  # every epoch (--eval_strategy steps: the last only)
            optimizer.eval()  # schedule-free AdamW: evaluate and save its averaged weights (no-op for AdamW)
            eval_metrics = evaluate(model, eval_dataloader, accelerator)
            eval_metrics.update(generation_eval(args, model, tokenizer, eval_conversations, accelerator, epoch))
        run.after_epoch(epoch, eval_metrics)  # log eval_*, eval_history.jsonl, epoch_N, best/
        if run.stopped_early:  # --early_stopping_patience: no improvement for that many evaluations
            break

    optimizer.eval()  # (a finished run resumed from a checkpoint saved in train mode)
    if run.load_best_model_at_end():  # --load_best_model_at_end: best/'s weights, evaluated below
        eval_metrics = None
    if eval_metrics is None:  # nothing left to train (--max_train_steps 0: the model as loaded, e.g. zero-shot)
        eval_metrics = evaluate(model, eval_dataloader, accelerator)
        eval_metrics.update(generation_eval(args, model, tokenizer, eval_conversations, accelerator, None))
    results = run.results(eval_metrics)
    results.update(eval_samples=len(eval_dataset), max_seq_length=max_seq_length, packing=args.packing, **dropped)
    if train_dataset is not None and args.packing:
        results["train_packed_rows"] = len(train_dataset)
    results.update(prompt_baseline(args, eval_conversations))
    run.save(model, tokenizer, results)  # model (or adapter) and all_results.json first
    run.end(results)  # all_results.json again, Hub push, end the trackers
    return results


def main(argv=None):
    """Parses `argv` (default: sys.argv) and trains. `notebook_launcher(main, (argv,), num_processes=2)`
    runs it from a notebook."""
    args = parse_args(argv)
    validate_common_args(args)
    with sigterm_checkpointing():  # SIGTERM/SIGUSR1 -> checkpoint after the current step, exit 75
        # --auto_find_batch_size: halve the batch on out-of-memory and start again (common/batch_size.py)
        return train_with_batch_size_search(training_function, args)


if __name__ == "__main__":
    run_script(main)  # the user's errors: one line, from one process (common/errors.py)

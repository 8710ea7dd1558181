"""Fine-tune a transformers model for token classification (NER, POS tagging, chunking) with 🤗 Accelerate.

Inputs: a Hub dataset (`--dataset_name conll2003`) or local files, `--train_file`, `--validation_file` and
optionally `--test_file`, either in the CoNLL column format most NER data comes in (one token per line,
whitespace-separated columns, the tag in the column chosen by `--task_name` or `--label_column_index`, a blank
line between sentences, `-DOCSTART-` lines skipped; `.txt`/`.conll` files, or any file whose lines are columns)
or in JSON/JSON Lines (a `tokens` list and a tags list per example; tags as strings or class-label ids).
IOB1 tags (CoNLL-2003 as released) are converted to IOB2 on load, so IOB1 and IOB2 copies of a data set
train and score identically. Metrics: seqeval entity-level precision/recall/F1 (conlleval-compatible default
mode) and word accuracy, through the 🤗 evaluate module `common/metrics/seqeval` (loaded by path: offline), on
exactly the words of the validation file; test predictions go to `predict_results.txt` in the input's word
order.

    accelerate launch examples/run_ner.py \\
        --model_name_or_path google-bert/bert-base-cased \\
        --train_file conll2003/train.txt --validation_file conll2003/valid.txt --task_name ner \\
        --per_device_train_batch_size 16 --learning_rate 5e-5 --num_train_epochs 3 \\
        --seed 42 --output_dir outputs/conll2003
"""

import argparse
import os

import datasets
import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.logging import get_logger
from accelerate.utils import ProjectConfiguration
from transformers import (
    AutoConfig,
    AutoModelForTokenClassification,
    AutoTokenizer,
    DataCollatorForTokenClassification,
    default_data_collator,
)

from common.accumulation import label_tokens
from common.adapters import apply_peft
from common.args import (
    add_common_args,
    capped_length,
    check_model_flags,
    check_tokenizer_has_vocabulary,
    model_max_length,
    validate_common_args,
)
from common.attention import set_attn_implementation
from common.batch_size import train_with_batch_size_search
from common.data import SPLIT_FLAGS, load_data_files, refuse_mixed_types, require_columns
from common.dataloaders import build_eval_dataloader, build_train_dataloader
from common.errors import run_script
from common.fast_dropout import enable_fast_dropout
from common.gradient_checkpointing import enable_gradient_checkpointing
from common.launch import setup_run
from common.metrics import load_metric
from common.optimization import build_lr_scheduler, build_optimizer, optimizer_options, plan_training_steps
from common.preemption import sigterm_checkpointing
from common.reporting import majority_baseline, progress_bar
from common.run import TrainingRun
from common.sampling import padding_multiple, refuse_padding_flags_with_max_length
from common.tasks.conll import CONLL_EXTENSIONS, JSON_EXTENSIONS, detect_format, iob1_to_iob2, read_conll, tag_scheme
from common.tasks.labels import align_labels, refuse_ignore_value
from common.tasks.predictions import write_token_predictions
from common.tracking import init_trackers, parse_report_to

logger = get_logger(__name__)

# Tag column of a CoNLL file per --task_name, in CoNLL-2003's layout `token POS chunk NER`
# (negative: counted from the end, so a 2-column `token tag` file works for NER too).
TASK_TAG_COLUMN = {"ner": -1, "pos": 1, "chunk": 2}
# BPE tokenizers that need a space before each pre-split word to tokenise it as in running text.
ADD_PREFIX_SPACE_MODELS = {"bloom", "gpt2", "roberta", "deberta", "longformer", "bart"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, file_extensions=JSON_EXTENSIONS + CONLL_EXTENSIONS)
    # CoNLL files come with any name (eng.train, train.iob); `detect_format` checks the format by content,
    # so the extension check of `validate_common_args` is switched off.
    parser.set_defaults(file_extensions=())
    task = parser.add_argument_group("token classification")
    task.add_argument(
        "--task_name",
        type=str,
        default="ner",
        choices=sorted(TASK_TAG_COLUMN),
        help="Which tags to learn: picks the CoNLL tag column (ner: last, pos: 2nd, chunk: 3rd) and the default "
        "label column `{task_name}_tags` of JSON and Hub data.",
    )
    task.add_argument(
        "--text_column_name", type=str, default=None, help="Column holding the list of words (default: tokens)."
    )
    task.add_argument(
        "--label_column_name",
        type=str,
        default=None,
        help="Column holding the list of tags (default: {task_name}_tags, else tags, else labels).",
    )
    task.add_argument(
        "--label_column_index",
        type=int,
        default=None,
        help="CoNLL files: 0-based column holding the tags (negative counts from the end). Overrides the column "
        "chosen by --task_name.",
    )
    task.add_argument(
        "--data_format",
        type=str,
        default="auto",
        choices=["auto", "conll", "json"],
        help="Format of the data files. auto: .json/.jsonl are JSON, anything else must be CoNLL columns.",
    )
    task.add_argument(
        "--label_names",
        type=str,
        default=None,
        help="Comma-separated tag names for data whose tags are integer ids without names (id i is the i-th "
        "name), e.g. JSON exported from the Hub conll2003 data set.",
    )
    task.add_argument(
        "--max_length",
        type=int,
        default=128,
        help="Maximum sub-word tokens per sentence; words past it are not seen by the model and count as "
        "predicted 'O' (a warning gives their number).",
    )
    task.add_argument(
        "--pad_to_max_length",
        action="store_true",
        help="Pad every example to --max_length (default: pad each batch to its longest example).",
    )
    task.add_argument(
        "--label_all_tokens",
        action="store_true",
        help="Train on every sub-word of a word, not only the first; continuation sub-words of a B-X word get I-X. "
        "Scoring is always on words (first sub-word).",
    )
    task.add_argument(
        "--return_entity_level_metrics",
        action="store_true",
        help="Also report precision/recall/F1/number per entity type.",
    )
    task.add_argument(
        "--ignore_mismatched_sizes",
        action="store_true",
        help="Replace a checkpoint's classification head whose labels differ from the data's.",
    )
    args = parser.parse_args(argv)
    check_model_flags(parser, args, new_model=None)  # --model_name_or_path is required (common/args.py)
    return args


def load_raw_datasets(args):
    """The Hub dataset for --dataset_name, otherwise the local files (CoNLL or JSON, see `detect_format`).

    Returns:
        (raw_datasets, text_column, label_column): a DatasetDict and the names of its word and tag columns.
        Local CoNLL files load into columns `tokens` and `{task_name}_tags` (or the names given by
        --text_column_name / --label_column_name).

    Raises:
        ValueError: naming flag and file for unreadable files or missing columns (see `read_conll`,
            `common.data.load_data_files`, `common.data.require_columns`).
    """
    if args.dataset_name is not None:
        raw_datasets = datasets.load_dataset(args.dataset_name, args.dataset_config_name)
    else:
        files = {"train": args.train_file, "validation": args.validation_file, "test": args.test_file}
        text_column = args.text_column_name or "tokens"
        label_column = args.label_column_name or f"{args.task_name}_tags"
        tag_column = TASK_TAG_COLUMN[args.task_name] if args.label_column_index is None else args.label_column_index
        splits = {}
        for split, path in files.items():
            if path is None:
                continue
            flag = SPLIT_FLAGS[split]
            if detect_format(path, flag, args.data_format) == "conll":
                splits[split] = read_conll(
                    path, tag_column, text_column, label_column, flag, require_tags=split != "test"
                )
            else:
                splits[split] = load_data_files({split: path})[split]
        raw_datasets = datasets.DatasetDict(splits)

    split = "train" if "train" in raw_datasets else "validation"
    columns = raw_datasets[split].column_names
    text_column = args.text_column_name or ("tokens" if "tokens" in columns else None)
    candidates = [f"{args.task_name}_tags", "tags", "labels", "label"]
    label_column = args.label_column_name or next((c for c in candidates if c in columns), None)
    where = SPLIT_FLAGS[split] + f" {getattr(args, split + '_file', None)}" if args.dataset_name is None else split
    if text_column is None or label_column is None:
        raise ValueError(
            f"{where}: no {'word' if text_column is None else 'tag'} column found (tried "
            f"{'tokens' if text_column is None else candidates}); pass --text_column_name / --label_column_name. "
            f"Columns present: {columns}."
        )
    for name, dataset in raw_datasets.items():
        needed = [text_column] + ([label_column] if name != "test" else [])
        path = None if args.dataset_name else getattr(args, f"{name}_file", None)
        require_columns(dataset, needed, name, path)
    return raw_datasets, text_column, label_column


def normalize_tags(args, raw_datasets, text_column, label_column, config=None):
    """Checks every labelled example and turns its tags into strings, converting IOB1 to IOB2.

    Integer tags are named by the data set's ClassLabel names, else by --label_names, else by a checkpoint's
    own `id2label` (when `config` has non-default labels), else by `str(id)`.

    Returns:
        (raw_datasets, scheme): the DatasetDict with `label_column` holding lists of str (IOB2 when the scheme
        is IOB), and the scheme of the training tags (see `tag_scheme`).

    Raises:
        ValueError: naming flag/file, example number (and its `id` and first line for CoNLL files) when an
            example's tags are not as many as its words, its words/tags are not lists of str (tags: or int), an
            integer tag has no name, or --label_names is empty.
    """
    split = "train" if "train" in raw_datasets else "validation"
    feature = raw_datasets[split].features[label_column]
    inner = getattr(feature, "feature", None)
    if inner is None and isinstance(feature, list) and feature:  # datasets' list feature [Value]
        inner = feature[0]
    names = getattr(inner, "names", None)
    if names is None and args.label_names is not None:
        names = [name.strip() for name in args.label_names.split(",") if name.strip()]
        if not names:
            raise ValueError("--label_names is empty; expected comma-separated tag names (id i = i-th name).")
    if names is None and config is not None:
        default = {i: f"LABEL_{i}" for i in range(config.num_labels)}
        id2label = {int(k): v for k, v in config.id2label.items()}
        if id2label != default:
            names = [id2label.get(i, str(i)) for i in range(max(id2label) + 1)]

    normalized = {}
    for name, dataset in raw_datasets.items():
        where = f"{SPLIT_FLAGS.get(name, name)} {getattr(args, f'{name}_file', None)}" if args.dataset_name is None \
            else f"{args.dataset_name} split {name}"
        if label_column not in dataset.column_names:
            for index, tokens in enumerate(dataset[text_column]):
                check_example_list(where, f"example {index}", text_column, tokens, (str,), "words (strings)")
            normalized[name] = dataset
            continue
        all_tokens, all_tags = dataset[text_column], dataset[label_column]
        ids = dataset["id"] if "id" in dataset.column_names else None
        first_lines = dataset["line"] if "line" in dataset.column_names else None
        refuse_ignore_value(all_tags, where, label_column, what="tag", unit="example")  # not a tag of its own
        converted = []
        for index, (tokens, tags) in enumerate(zip(all_tokens, all_tags)):
            ident = f"example {index}" + (f" (id {ids[index]!r})" if ids is not None else "")
            ident += f", starting at line {first_lines[index]}" if first_lines is not None else ""
            check_example_list(where, ident, text_column, tokens, (str,), "words (strings)")
            check_example_list(where, ident, label_column, tags, (str, int), "tags (strings, or integer ids)")
            if tokens is None or tags is None or len(tokens) != len(tags):
                raise ValueError(
                    f"{where}: {ident} has {len(tokens or [])} words in column '{text_column}' but "
                    f"{len(tags or [])} tags in column '{label_column}'; expected one tag per word."
                )
            strings = []
            for tag in tags:
                if isinstance(tag, str):
                    strings.append(tag)
                elif names is None:
                    strings.append(str(tag))
                elif 0 <= int(tag) < len(names):
                    strings.append(names[int(tag)])
                else:
                    raise ValueError(
                        f"{where}: example {index} has tag id {tag}, but only {len(names)} tag names are known "
                        f"({names}); check --label_names."
                    )
            converted.append(strings)
        # tags "B-PER" in one example, ids 1, 0 in another: both pass the checks above, and would become classes
        refuse_mixed_types(dataset, [label_column], where,
                           None if args.dataset_name else getattr(args, f"{name}_file", None))
        normalized[name] = (dataset, converted)

    train_labels = {tag for tags in normalized[split][1] for tag in tags}
    scheme = tag_scheme(train_labels)
    result = {}
    for name, item in normalized.items():
        if not isinstance(item, tuple):
            result[name] = item
            continue
        dataset, converted = item
        if scheme == "IOB":
            converted = [iob1_to_iob2(tags) for tags in converted]
        result[name] = dataset.remove_columns(label_column).add_column(label_column, converted)
    return datasets.DatasetDict(result), scheme


def check_example_list(where, ident, column, values, kinds, expected):
    """Raises ValueError naming `where` (flag and file), `ident` (the example) and `column` when `values` is neither
    None (reported by the caller) nor a list whose items are all of `kinds` (bool excluded); `expected` describes
    the items in the message. Catches a string where a list of words belongs, and null, number or float items."""
    if values is None:
        return
    if not isinstance(values, list):
        found = f"a {type(values).__name__} ({values!r:.60})"
    else:
        wrong = [v for v in values if isinstance(v, bool) or not isinstance(v, kinds)]
        if not wrong:
            return
        found = f"{wrong[0]!r} ({type(wrong[0]).__name__}) among its items"
    raise ValueError(f"{where}: {ident}: column '{column}' holds {found}; expected a list of {expected}.")


def build_label_list(args, raw_datasets, label_column, scheme):
    """The sorted tag list of the training split. For IOB data it holds `O`, and `B-X` and `I-X` for every type X
    seen, so that --label_all_tokens continuations and any IOB2 entity of a seen type have a class.

    Returns:
        list of str.

    Raises:
        ValueError: naming the validation file (or split) and the tag(s) that the training data never has.
    """
    split = "train" if "train" in raw_datasets else "validation"
    labels = {tag for tags in raw_datasets[split][label_column] for tag in tags}
    if scheme == "IOB":
        labels |= {f"{prefix}-{label[2:]}" for label in labels if label != "O" for prefix in "BI"} | {"O"}
    label_list = sorted(labels)
    if split == "train" and "validation" in raw_datasets:
        seen = {tag for tags in raw_datasets["validation"][label_column] for tag in tags}
        unseen = sorted(seen - labels)
        if unseen:
            where = "the validation split" if args.dataset_name else f"--validation_file {args.validation_file}"
            raise ValueError(
                f"{where}: tag(s) {unseen} in column '{label_column}' never occur in the training data (tags "
                f"there: {label_list}). The model cannot learn them; fix the files or add examples to training."
            )
    return label_list


def continuation_ids(label_to_id):
    """{tag id: id of the tag a continuation sub-word gets}: `B-X` -> `I-X`, every other tag -> itself.

    Raises:
        ValueError: for IOBES tags (`E-X`, `S-X`), whose sub-word continuation is not a single tag.
    """
    result = {}
    for label, index in label_to_id.items():
        if label.startswith(("E-", "S-")):
            raise ValueError(
                f"--label_all_tokens supports IOB1/IOB2 and non-entity tags (POS), not IOBES tags such as {label!r}."
            )
        result[index] = label_to_id.get("I-" + label[2:], index) if label.startswith("B-") else index
    return result


def align_labels_with_tokens(word_ids, word_label_ids, continuation=None):
    """Sub-word labels for one sentence from its word labels.

    Args:
        word_ids: the fast tokenizer's `word_ids()` for the sentence: per sub-word token the index of its word,
            None for special tokens and padding.
        word_label_ids: one class id per word.
        continuation: None to label only the first sub-word of each word (the others get -100, ignored by the
            loss); or the `continuation_ids` map, with which the later sub-words of a word get the `I-` form of
            its label (never a second `B-`, which would split one entity into several).

    Returns:
        list of int, len(word_ids): class ids, -100 where the loss ignores the token.
    """
    labels, previous = [], None
    for word in word_ids:
        if word is None:
            labels.append(-100)
        elif word != previous:
            labels.append(word_label_ids[word])
        else:
            labels.append(-100 if continuation is None else continuation[word_label_ids[word]])
        previous = word
    return labels


def word_level_predictions(token_predictions, word_ids, num_words, id2label, fill="O"):
    """One predicted tag per word: the prediction at the word's first sub-word.

    Args:
        token_predictions: class ids per token position (a padded row; positions past len(word_ids) ignored).
        word_ids: the sentence's `word_ids()` (-1 or None for special tokens and padding).
        num_words: words in the sentence.
        id2label: {class id: tag}.
        fill: tag for words the model never saw (cut by --max_length, or tokenised to nothing).

    Returns:
        list of str, length num_words, in word order.
    """
    predictions = [None] * num_words
    for position, word in enumerate(word_ids):
        if word is not None and word >= 0 and predictions[word] is None:
            predictions[word] = id2label[int(token_predictions[position])]
    return [fill if p is None else p for p in predictions]


def select_samples(args, raw_datasets):
    """Truncates each split to --max_train_samples / --max_eval_samples / --max_predict_samples."""
    limits = {"train": args.max_train_samples, "validation": args.max_eval_samples, "test": args.max_predict_samples}
    return datasets.DatasetDict(
        {
            split: dataset.select(range(min(limits[split], len(dataset)))) if limits.get(split) else dataset
            for split, dataset in raw_datasets.items()
        }
    )


def preprocess(args, raw_datasets, tokenizer, text_column, label_column, label_to_id, accelerator):
    """Tokenises pre-split words and aligns the tags with the sub-words.

    Training rows are labelled on the first sub-word of each word (all sub-words with --label_all_tokens,
    see `align_labels_with_tokens`). Validation and test rows carry no labels: they are scored on words, with
    `example_index` (row number) and `word_ids` (-1 for special tokens) to map predictions back.

    Returns:
        {split: Dataset}. Train rows: input_ids, attention_mask (token_type_ids), labels. Validation/test rows:
        input_ids, attention_mask (token_type_ids), example_index, word_ids.
    """
    padding = "max_length" if args.pad_to_max_length else False
    continuation = continuation_ids(label_to_id) if args.label_all_tokens else None
    # Longer than the position embeddings would fail inside the model: capped, with a warning.
    max_length = capped_length("--max_length", args.max_length, model_max_length(tokenizer), logger)

    def tokenize(examples, indices, labelled):
        result = tokenizer(
            examples[text_column], is_split_into_words=True, truncation=True, max_length=max_length,
            padding=padding,
        )
        if labelled:
            result["labels"] = [
                align_labels_with_tokens(result.word_ids(i), [label_to_id[t] for t in tags], continuation)
                for i, tags in enumerate(examples[label_column])
            ]
        else:
            result["example_index"] = list(indices)
            result["word_ids"] = [
                [-1 if w is None else w for w in result.word_ids(i)] for i in range(len(indices))
            ]
        return result

    processed = {}
    # The main process tokenises first and writes the datasets cache; the others then read it.
    with accelerator.main_process_first():
        for split, dataset in raw_datasets.items():
            processed[split] = dataset.map(
                tokenize,
                batched=True,
                with_indices=True,
                fn_kwargs={"labelled": split == "train"},
                num_proc=args.preprocessing_num_workers,
                remove_columns=dataset.column_names,
                load_from_cache_file=not args.overwrite_cache,
                desc=f"Tokenizing {split}",
            )
    for split in ("validation", "test"):
        if split in processed:
            word_ids = processed[split]["word_ids"]
            seen = sum(len({w for w in ids if w >= 0}) for ids in word_ids)
            total = sum(len(tokens) for tokens in raw_datasets[split][text_column])
            if seen < total:
                logger.warning(
                    f"{split}: {total - seen} of {total} words lie past --max_length {max_length} (or tokenise "
                    "to nothing); they count as predicted 'O'. Raise --max_length to score them."
                )
    return processed


def label_config(args, raw_datasets, text_column, label_column):
    """The model config with the data's tags as its labels.

    Loads `--config_name` / `--model_name_or_path`'s config, normalises the tags (IOB1 -> IOB2, see
    `normalize_tags`) and aligns the tag list with a checkpoint's own `label2id` (`common.tasks.labels`).

    Returns:
        (config, raw_datasets with normalised tags, scheme, label_to_id): scheme as `tag_scheme`;
        label_to_id maps each tag (str) to its class id.

    Raises:
        ValueError: see `normalize_tags`, `build_label_list` and `common.tasks.labels.align_labels`.
    """
    config = AutoConfig.from_pretrained(
        args.config_name or args.model_name_or_path, trust_remote_code=args.trust_remote_code
    )
    raw_datasets, scheme = normalize_tags(args, raw_datasets, text_column, label_column, config)
    label_list = build_label_list(args, raw_datasets, label_column, scheme)
    label_to_id = align_labels(config, label_list, args.model_name_or_path, args.ignore_mismatched_sizes)
    logger.info(f"Tag scheme {scheme}{' (converted to IOB2)' if scheme == 'IOB' else ''}; labels: {label_list}")
    return config, raw_datasets, scheme, label_to_id


def load_model_and_tokenizer(args, config):
    """The fast tokenizer (word alignment needs `word_ids()`; BPE tokenizers get `add_prefix_space`) and
    `AutoModelForTokenClassification` for `config` (from `label_config`).

    Returns:
        (model, tokenizer). A tokenizer without a pad token (GPT-2 style) pads with its EOS token.

    Raises:
        ValueError: naming --tokenizer_name/--model_name_or_path when the tokenizer is not a fast one.
    """
    tokenizer_kwargs = {"add_prefix_space": True} if config.model_type in ADD_PREFIX_SPACE_MODELS else {}
    tokenizer = AutoTokenizer.from_pretrained(
        args.tokenizer_name or args.model_name_or_path,
        use_fast=not args.use_slow_tokenizer,
        trust_remote_code=args.trust_remote_code,
        **tokenizer_kwargs,
    )
    check_tokenizer_has_vocabulary(tokenizer, args)  # not an empty one (a model folder without tokenizer files)
    if not tokenizer.is_fast:
        raise ValueError(
            f"--tokenizer_name/--model_name_or_path: {type(tokenizer).__name__} is not a fast tokenizer; word "
            "alignment needs `word_ids()`. Drop --use_slow_tokenizer or use a model with a tokenizer.json."
        )
    if tokenizer.pad_token is None:  # GPT-2 style tokenizers have no pad token
        tokenizer.pad_token = tokenizer.eos_token
        config.pad_token_id = tokenizer.pad_token_id
    model = AutoModelForTokenClassification.from_pretrained(
        args.model_name_or_path,
        config=config,
        ignore_mismatched_sizes=args.ignore_mismatched_sizes,
        trust_remote_code=args.trust_remote_code,
    )
    return model, tokenizer


def predict(model, dataloader, accelerator, word_ids, num_words, id2label, metric=None, references=None):
    """Runs the model over `dataloader` on every process and returns word-level tags.

    Each process pads its per-batch predictions to a common length (`pad_across_processes`), then
    `gather_for_metrics` collects them with their `example_index` and drops the samples that the distributed
    sampler repeated to give every process equal batches.

    Args:
        word_ids: per dataset row, its `word_ids` column; num_words: per row, its number of words.
        metric: an `evaluate` module (`load_metric("seqeval")`) or None; when given, every gathered batch's
            word-level tags are added to it (`add_batch`) with their gold tags, `references` (per dataset row, a
            list of str tags).

    Returns:
        list (one entry per dataset row, in dataset order) of lists of str (one tag per word, see
        `word_level_predictions`).

    Raises:
        RuntimeError: when a row is predicted twice or never (which would mean duplicated or lost samples).
    """
    model.eval()
    predictions = [None] * len(word_ids)
    for batch in progress_bar(dataloader, accelerator, "evaluate" if metric is not None else "predict"):
        example_index = batch.pop("example_index")
        with torch.no_grad():
            logits = model(**batch).logits
        token_predictions = accelerator.pad_across_processes(logits.argmax(dim=-1), dim=1, pad_index=-100)
        example_index, token_predictions = accelerator.gather_for_metrics((example_index, token_predictions))
        indices = example_index.tolist()
        for index, row in zip(indices, token_predictions.cpu().tolist()):
            if predictions[index] is not None:
                raise RuntimeError(f"Example {index} was predicted twice.")
            predictions[index] = word_level_predictions(row, word_ids[index], num_words[index], id2label)
        if metric is not None:
            metric.add_batch(predictions=[predictions[i] for i in indices],
                             references=[references[i] for i in indices])
    missing = [i for i, p in enumerate(predictions) if p is None]
    if missing:
        raise RuntimeError(f"{len(missing)} examples were never predicted (first: {missing[:5]}).")
    return predictions


def score_tags(model, dataloader, accelerator, word_ids, references, scheme, return_entity_level_metrics=False):
    """Tags the sentences of `dataloader` (`predict`) and scores them against `references` with the seqeval
    metric module (`common/metrics/seqeval`, loaded by path through `common.metrics.load_metric`: offline).

    seqeval's default mode reproduces the CoNLL shared tasks' `conlleval`: entity-level precision, recall and F1
    (micro averages over entity types, 0 when undefined) and word accuracy; IOB1 and IOB2 score alike. Every
    process adds every gathered batch to its own in-memory copy of the metric (`keep_in_memory=True`: no cache
    file shared between processes) and computes it, so every process returns the same values.

    Args:
        word_ids: per row, its `word_ids` column; references: per row, its gold tags (str).
        scheme: `tag_scheme` of the data; for "none" (POS tags) only accuracy is returned.
        return_entity_level_metrics: add `{TYPE}_precision`, `{TYPE}_recall`, `{TYPE}_f1`, `{TYPE}_number`.

    Returns:
        (metrics, predictions): metrics = {"accuracy", "precision", "recall", "f1"} (fractions; "accuracy" only
        for scheme "none"); predictions = per row, its predicted tags (str), in dataset order.
    """
    metric = load_metric("seqeval", keep_in_memory=True)
    id2label = accelerator.unwrap_model(model).config.id2label
    num_words = [len(tags) for tags in references]
    predictions = predict(model, dataloader, accelerator, word_ids, num_words, id2label, metric, references)
    metrics = metric.compute(scheme=scheme, return_entity_level_metrics=return_entity_level_metrics)
    return metrics, predictions


def evaluate(model, dataloader, accelerator, word_ids, references, scheme, return_entity_level_metrics=False):
    """Scores the model's word-level tags on the validation DataLoader (`score_tags`: seqeval module).

    Args:
        word_ids: per validation row, its `word_ids` column; references: per row, its gold tags (str).
        scheme, return_entity_level_metrics: see `score_tags`.

    Returns:
        the seqeval metrics (see `score_tags`) plus "samples" (sentences scored: the dataset size on any number of
        processes) and "words" (words scored).
    """
    metrics, predictions = score_tags(model, dataloader, accelerator, word_ids, references, scheme,
                                      return_entity_level_metrics)
    return {**metrics, "samples": len(predictions), "words": sum(len(tags) for tags in references)}


def majority_tag_baseline(raw_datasets, label_column, references, scheme):
    """The trivial baseline of tagging: the training set's most frequent tag (`O` for NER) on every validation
    word, scored by the seqeval module as `evaluate` scores the model: entity precision, recall and F1 are 0
    (no entity predicted), accuracy is the share of words with that tag.

    Args:
        raw_datasets: the word-level splits ("train" gives the tag counts; without it, in an evaluation-only run,
            the validation set's own most frequent tag); references: per validation sentence, its gold tags.

    Returns:
        {"baseline": "majority class of the training set (O on every word)", "eval_baseline_accuracy", ...}.
    """
    train_tags = [tag for tags in raw_datasets["train"][label_column] for tag in tags] if "train" in raw_datasets \
        else None

    def score(predicted):  # the same tag for every word
        metric = load_metric("seqeval", keep_in_memory=True)
        return metric.compute(predictions=[[predicted[0]] * len(tags) for tags in references],
                              references=references, scheme=scheme)

    flat = [tag for tags in references for tag in tags]
    return majority_baseline(train_tags, flat, score, describe=lambda tag: f"{tag} on every word")


def predict_test_split(model, dataloader, accelerator, test_dataset, word_ids, text_column, label_column, scheme,
                       output_dir, return_entity_level_metrics=False):
    """Tags the test split, writes `<output_dir>/predict_results.txt` (`write_token_predictions`, input order)
    and scores it (`score_tags`: seqeval module) when the test data has tags.

    Args:
        dataloader: the prepared test DataLoader; test_dataset: the raw (word-level) test split;
        word_ids: per test row, its `word_ids` column.

    Returns:
        dict: `predict_*` metrics (when tagged) and `predict_samples` (sentences).
    """
    tokens = test_dataset[text_column]
    references = test_dataset[label_column] if label_column in test_dataset.column_names else None
    results = {}
    if references is not None:
        metrics, predictions = score_tags(model, dataloader, accelerator, word_ids, references, scheme,
                                          return_entity_level_metrics)
        results.update({f"predict_{k}": v for k, v in metrics.items()})
    else:
        id2label = accelerator.unwrap_model(model).config.id2label
        predictions = predict(model, dataloader, accelerator, word_ids, [len(words) for words in tokens], id2label)
    results["predict_samples"] = len(tokens)
    if accelerator.is_main_process:
        write_token_predictions(os.path.join(output_dir, "predict_results.txt"), tokens, predictions, references)
    return results


def training_function(args):
    """Fine-tunes `--model_name_or_path` for token classification, evaluating on the validation words after
    every epoch; saves the model, `all_results.json`, `eval_history.jsonl` and (with `--test_file`)
    `predict_results.txt` in `--output_dir`.

    Returns:
        the `all_results.json` dict.
    """
    # The launch config decides devices and processes; these arguments decide accumulation, precision and
    # trackers. `use_seedable_sampler`: an epoch's order depends on (seed, epoch) only, so resumes are exact.
    accelerator = Accelerator(
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        mixed_precision=args.mixed_precision,
        log_with=parse_report_to(args.report_to) if args.with_tracking else None,
        project_config=ProjectConfiguration(project_dir=args.output_dir, logging_dir=args.output_dir),
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True),
    )
    setup_run(accelerator, args, logger)  # process-group check, logging on the main process, seed

    raw_datasets, text_column, label_column = load_raw_datasets(args)
    config, raw_datasets, scheme, label_to_id = label_config(args, raw_datasets, text_column, label_column)
    raw_datasets = select_samples(args, raw_datasets)
    model, tokenizer = load_model_and_tokenizer(args, config)
    processed = preprocess(args, raw_datasets, tokenizer, text_column, label_column, label_to_id, accelerator)
    train_dataset, eval_dataset, predict_dataset = (processed.get(s) for s in ("train", "validation", "test"))
    if eval_dataset is None:
        raise ValueError("Need validation data: --validation_file, or a --dataset_name with a validation split.")
    if train_dataset is None and args.max_train_steps != 0:
        raise ValueError("Need training data (--train_file), or --max_train_steps 0 to evaluate the model only.")
    eval_word_ids, eval_references = eval_dataset["word_ids"], raw_datasets["validation"][label_column]
    # Pad each batch to its longest sentence, labels with -100 (to multiples of 8 under mixed precision: tensor
    # cores), unless --pad_to_max_length padded every example at tokenisation.
    data_collator = default_data_collator if args.pad_to_max_length else DataCollatorForTokenClassification(
        tokenizer, pad_to_multiple_of=padding_multiple(args, accelerator)
    )
    train_dataloader = build_train_dataloader(args, train_dataset, data_collator, accelerator)
    eval_dataloader = build_eval_dataloader(args, eval_dataset.remove_columns("word_ids"), data_collator)

    # --use_peft: LoRA adapters, the task's head trained in full (common/adapters.py)
    model = apply_peft(model, args, task_type="TOKEN_CLS", modules_to_save=["classifier", "score"], logger=logger)
    if args.attn_implementation:  # the attention kernel, e.g. eager for small heads under bf16 (common/attention.py)
        set_attn_implementation(model, args.attn_implementation, accelerator.device, logger)
    if args.fast_dropout:  # cheaper dropout masks on CPU (common/fast_dropout.py)
        enable_fast_dropout(model, args.attn_implementation)
    if args.gradient_checkpointing:  # activations recomputed in backward (common/gradient_checkpointing.py)
        enable_gradient_checkpointing(model, accelerator)
    optimizer = build_optimizer(model, args.learning_rate, args.weight_decay, **optimizer_options(args))
    # Step counts for the DataLoader length that `prepare` will produce; the scheduler is sized from them.
    plan = plan_training_steps(args, train_dataloader, accelerator)
    lr_scheduler = build_lr_scheduler(
        optimizer, args.lr_scheduler_type, args.num_warmup_steps, plan.max_train_steps, accelerator
    )

    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler
    )
    init_trackers(accelerator, "ner_no_trainer", args)  # the run's flags; logged steps = optimizer steps
    # banner, counters, hooks; the loss is a mean over label tokens (common/accumulation.py)
    run = TrainingRun(accelerator, args, plan, train_dataloader, optimizer, logger,
                      loss_items=label_tokens(shift=0))
    # The evaluation of --eval_steps (inside the epoch) and of the best model (best/, early stopping)
    run.set_evaluation(model, lambda: evaluate(model, eval_dataloader, accelerator, eval_word_ids, eval_references,
                                               scheme, args.return_entity_level_metrics), tokenizer, main_metric="f1")
    if (checkpoint := run.checkpoint_to_resume()) is not None:  # --resume_from_checkpoint
        accelerator.load_state(str(checkpoint))  # model, optimizer, scheduler, RNG states of every process
        run.resume_from(checkpoint)  # completed steps, the epoch and batches to skip, the running totals

    eval_metrics = None
    for epoch in range(run.starting_epoch, run.num_train_epochs):
        model.train()
        optimizer.train()  # schedule-free AdamW trains at its interpolated weights (no-op for AdamW)
        # An epoch's order depends on (seed, epoch) only. set_epoch on the prepared DataLoader reaches its sampler,
        # which a skipping DataLoader shares (on 2+ processes set_epoch on the skipping one would not reach it).
        train_dataloader.set_epoch(epoch)
        # Resuming mid-epoch: skip the batches already trained on.
        skip = run.batches_to_skip if epoch == run.starting_epoch else 0
        active_dataloader = accelerator.skip_first_batches(train_dataloader, skip) if skip else train_dataloader
        for batch in active_dataloader:
            # Inside `accumulate`, gradients are synced and the optimizer and scheduler really step only
            # every --gradient_accumulation_steps micro-batches (and at the end of the epoch).
            with accelerator.accumulate(model):
                loss = model(**batch).loss
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
            # After an optimizer step: progress bar, log loss and lr, step_N, SIGTERM; True once finished.
            if accelerator.sync_gradients and run.after_optimizer_step(epoch):
                break
        if run.evaluates_after_epoch(epoch):  # every epoch (--eval_strategy steps: the last only)
            optimizer.eval()  # schedule-free AdamW: evaluate and save its averaged weights (no-op for AdamW)
            eval_metrics = evaluate(model, eval_dataloader, accelerator, eval_word_ids, eval_references, scheme,
                                    args.return_entity_level_metrics)
        run.after_epoch(epoch, eval_metrics)  # log eval_*, eval_history.jsonl, epoch_N, best/
        if run.stopped_early:  # --early_stopping_patience: no improvement for that many evaluations
            break

    optimizer.eval()  # (a finished run resumed from a checkpoint saved in train mode)
    if run.load_best_model_at_end():  # --load_best_model_at_end: best/'s weights, evaluated below
        eval_metrics = None
    if eval_metrics is None:  # nothing left to train (--max_train_steps 0, or a finished run resumed)
        eval_metrics = evaluate(model, eval_dataloader, accelerator, eval_word_ids, eval_references, scheme,
                                args.return_entity_level_metrics)
    results = run.results(eval_metrics)
    results.update(majority_tag_baseline(raw_datasets, label_column, eval_references, scheme))  # all-O
    run.save(model, tokenizer, results)  # model and all_results.json first: nothing below can lose them

    if predict_dataset is not None:
        predict_dataloader = accelerator.prepare(
            build_eval_dataloader(args, predict_dataset.remove_columns("word_ids"), data_collator)
        )
        results.update(predict_test_split(
            model, predict_dataloader, accelerator, raw_datasets["test"], predict_dataset["word_ids"], text_column,
            label_column, scheme, args.output_dir, args.return_entity_level_metrics,
        ))
    run.end(results)  # all_results.json again, Hub push, end the trackers
    return results


def main(argv=None):
    """Parses `argv` (default: sys.argv) and trains. `notebook_launcher(main, (argv,), num_processes=2)`
    runs it from a notebook."""
    args = parse_args(argv)
    validate_common_args(args)
    refuse_padding_flags_with_max_length(args, "--max_length")
    # SIGTERM/SIGUSR1 -> checkpoint after the current optimizer step, exit 75 (common/preemption.py)
    with sigterm_checkpointing():
        # --auto_find_batch_size: halve the batch on out-of-memory and start again (common/batch_size.py)
        return train_with_batch_size_search(training_function, args)


if __name__ == "__main__":
    run_script(main)  # the user's errors: one line, from one process (common/errors.py)

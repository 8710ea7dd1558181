"""Task knowledge of the scripts in `examples/`, outside their training loops: what several scripts share, and
a task's long readers and metrics that a reader adapting its script need not see. One contract per module.

- `common.tasks.audio`: audio files to mono waveforms at the model's rate (soundfile, scipy resampling), audio
  folders and listings, labels from file names, convolutional receptive fields (run_audio_classification,
  run_wav2vec2_pretraining).
- `common.tasks.coco`: COCO files and their categories (run_object_detection, run_instance_segmentation); instance
  files (polygons and RLE masks) read and checked against their images, masks as COCO RLE (run_instance_segmentation).
- `common.tasks.config_overrides`: `--config_overrides` parsing, and a new config built from it by the config
  class (run_clm, run_image_classification, run_translation, run_summarization).
- `common.tasks.conll`: CoNLL column files: format detection, reading, IOB tag schemes (run_ner).
- `common.tasks.gguf`: GGUF files de-quantised to plain float32 causal LMs (run_clm, examples/gguf_to_safetensors.py).
- `common.tasks.images`: images of any mode as 8-bit RGB (the image scripts); the image-folder and augmentation
  flags of run_image_classification and run_mim and their checks.
- `common.tasks.labels`: class ids for the data's labels, agreed with a checkpoint's own `label2id`
  (run_glue, run_ner, run_image_classification, run_audio_classification), and the class names of a
  single-label set (`resolve_class_labels`).
- `common.tasks.lm_data`: language-model data preparation: raw text from the Hub or .txt / .csv / .json(l) files,
  the validation split held out of the training rows, the text column, tokenising and grouping into blocks, where a
  tokenizer puts its special tokens (run_clm, run_mlm, run_fim, run_sft).
- `common.tasks.predictions`: prediction files, one writer per layout (class labels, CoNLL tags, SQuAD JSON,
  generated text).
- `common.tasks.rouge`: ROUGE of generated texts and the lead-3 baseline (run_summarization, run_sft).
- `common.tasks.seq2seq`: encoder-decoder helpers of run_translation and run_summarization (tokenizer training,
  model loading fitted to the tokenizer, distributed generation).
- `common.tasks.squad`: SQuAD reading, post-processing of start/end logits into answers, and the official
  SQuAD v1.1 / v2.0 metrics (run_qa).
"""

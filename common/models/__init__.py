"""Model classes that transformers does not ship, saved as custom code beside their checkpoints.

Each module here is self-contained (imports only torch and transformers), so `save_pretrained` copies it into the
checkpoint folder and `from_pretrained(folder, trust_remote_code=True)` loads it anywhere, as a Hub repository with
custom code would.

- `common.models.efficientnet_lite`: EfficientNet-Lite (no squeeze-and-excitation, ReLU6, TF "SAME" padding), the
  network of the EfficientNet-Lite0 ImageNet weights (`examples/efficientnet_lite_to_hf.py`).
"""

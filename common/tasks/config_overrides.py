"""`--config_overrides`: settings of a model built from scratch, given on the command line.

The syntax (`parse_config_overrides`) is the transformers examples' `key=value,key=value`, with values read as
JSON where they parse, so lists (`depths=[1,1]`) work too. `apply_config_overrides` builds the new config through
the config class's constructor, so that attributes derived from others follow them.
"""

import json
import re

# Config attributes computed from others (backbone stages, from `depths`): rebuilt, not copied, when a config is
# rebuilt with overrides.
DERIVED_CONFIG_KEYS = ("stage_names", "out_features", "out_indices", "_out_features", "_out_indices")

# Python spellings accepted besides JSON's true/false/null.
PYTHON_LITERALS = {"True": True, "False": False, "None": None}


def parse_config_overrides(text):
    """Parses --config_overrides: comma-separated `key=value` pairs; values are read as JSON when they parse
    (numbers, true/false, null, [lists]; also Python's True/False/None) and as strings otherwise. Commas inside
    [...] belong to the value.

    Returns:
        dict, e.g. "depths=[1,1],layer_type=basic,image_size=28" -> {"depths": [1, 1], "layer_type": "basic",
        "image_size": 28}; {} for None or "".

    Raises:
        ValueError: naming --config_overrides and the part that is not key=value.
    """
    overrides = {}
    for part in re.findall(r"(?:\[[^\]]*\]|[^,])+", text or ""):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--config_overrides {text}: '{part}' is not key=value.")
        try:
            overrides[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            value = value.strip()
            overrides[key.strip()] = PYTHON_LITERALS.get(value, value)
    return overrides


def apply_config_overrides(config, text, extra=None):
    """The config with the --config_overrides settings `text` (and `extra`) applied.

    The result is built by the config class's constructor from the settings of `config` that differ from the
    class defaults, minus `DERIVED_CONFIG_KEYS`, plus the overrides: attributes that the constructor derives
    from others (ResNet's `stage_names`/`out_features` from `depths`, T5's `dense_act_fn` from
    `feed_forward_proj`) follow the overrides instead of keeping stale values, as `setattr` or
    `PretrainedConfig.update_from_string` would.

    Args:
        config: a `transformers.PretrainedConfig` (defaults, --config_name's or a checkpoint's); not modified.
        text: the --config_overrides value (see `parse_config_overrides`), or None.
        extra: optional dict of further settings computed by the script (e.g. {"image_size": 28}); its keys
            must be attributes of the config.

    Returns:
        a new config of the same class, or `config` itself when there is nothing to override.

    Raises:
        ValueError: naming --config_overrides and the text when a part is not key=value, a key is not an
            attribute of the config, or the resulting config does not survive `to_dict`/`from_dict`.
    """
    overrides = {**parse_config_overrides(text), **(extra or {})}
    unknown = [key for key in overrides if not hasattr(config, key)]
    if unknown:
        raise ValueError(
            f"--config_overrides {text}: key {', '.join(unknown)} is not an attribute of {type(config).__name__}."
        )
    if not overrides:
        return config
    try:
        defaults = type(config)().to_dict()
    except Exception:  # a config class that needs arguments (composite configs): keep every setting
        defaults = {}
    base = {key: value for key, value in config.to_dict().items()
            if key not in DERIVED_CONFIG_KEYS and (key not in defaults or defaults[key] != value)}
    new_config = type(config)(**{**base, **overrides})
    try:
        type(new_config).from_dict(new_config.to_dict())
    except (TypeError, ValueError) as error:
        raise ValueError(f"--config_overrides {text}: the config is not valid ({error}).") from error
    return new_config

"""Image files opened with a clear error, and images of any mode as the 8-bit RGB that image processors expect
(run_image_classification, run_semantic_segmentation, run_object_detection)."""

import io
import os

import numpy as np
from PIL import Image, ImageOps

ALPHA_MODES = ("RGBA", "LA", "PA", "RGBa")
SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N")


def to_rgb(image):
    """Converts a PIL image of any mode to 8-bit RGB.

    - 16-bit grey (`I;16*`) is scaled by 255/65535; 32-bit integer (`I`) the same when a value exceeds 255
      (16-bit PNGs open as `I` in some Pillow versions), else taken as 8-bit; float (`F`) is taken as 0-1 when
      its maximum is <= 1, else as 0-255. Without this, Pillow's own conversion clips everything above 255
      to white.
    - Alpha (RGBA, LA, PA, P or L with a transparency key) is composited onto a white background, as
      transformers' `image_transforms.convert_to_rgb` does; dropping it instead shows the colour hidden
      under transparent pixels (often black).
    - Everything else (1, L, P, CMYK, YCbCr, ...) goes through `Image.convert("RGB")`.

    Returns:
        a PIL image in mode "RGB", same size.

    Raises:
        ValueError: for a mode Pillow cannot convert to RGB.
    """
    mode = image.mode
    if mode in SIXTEEN_BIT_MODES or mode == "I":
        array = np.asarray(image).astype(np.float64)
        if mode in SIXTEEN_BIT_MODES or array.max() > 255:
            array = array * 255.0 / 65535.0
        image = Image.fromarray(np.clip(np.round(array), 0, 255).astype(np.uint8))
    elif mode == "F":
        array = np.asarray(image).astype(np.float64)
        if array.size and np.nanmax(array) <= 1.0:
            array = array * 255.0
        image = Image.fromarray(np.clip(np.round(np.nan_to_num(array)), 0, 255).astype(np.uint8))
    if image.mode in ALPHA_MODES or (image.mode in ("P", "L", "RGB") and "transparency" in image.info):
        rgba = image.convert("RGBA")
        image = Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba)
    try:
        return image.convert("RGB")
    except ValueError as error:
        raise ValueError(f"cannot convert an image of mode {mode} to RGB ({error})") from error


def open_image(record):
    """Opens and decodes one image file (photo or mask), applying its EXIF orientation.

    Args:
        record: a `{"path", "bytes"}` dict (`datasets.Image(decode=False)`), a file path, or a PIL image.

    Returns:
        (PIL image in its own mode, name: the file path or "<embedded image>"). A PIL image is returned as it
        is (its name: its `filename`, or "<in-memory image>"), without EXIF transposition.

    Raises:
        ValueError: naming the file when it is missing, empty, truncated or not an image.
    """
    if isinstance(record, Image.Image):
        return record, getattr(record, "filename", "") or "<in-memory image>"
    path, data = (record, None) if isinstance(record, str) else (record.get("path"), record.get("bytes"))
    name = path or "<embedded image>"
    if data is None and path is not None and os.path.isfile(path) and os.path.getsize(path) == 0:
        raise ValueError(f"{name}: the image file is empty (0 bytes).")
    try:
        image = Image.open(io.BytesIO(data) if data is not None else path)
        image.load()  # decode now: truncated files fail here, not in the middle of training
    except FileNotFoundError:
        raise ValueError(f"{name}: image file not found.") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as error:
        raise ValueError(f"{name}: not a readable image ({type(error).__name__}: {error}).") from error
    return ImageOps.exif_transpose(image), name

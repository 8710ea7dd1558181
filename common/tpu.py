"""Tied weights on TPU."""

from accelerate.utils import DistributedType


def tie_weights_on_xla(model, accelerator):
    """Re-ties input and output embeddings after `accelerator.prepare` on XLA (TPU).

    Moving a model to an XLA device copies each parameter, which breaks the sharing between a
    language model's input embedding and its output projection; `model.tie_weights()` makes them
    one tensor again. Elsewhere this does nothing. (The transformers CLM example tests
    `DistributedType.TPU`, which accelerate 1.0 renamed to `DistributedType.XLA`.)

    Args:
        model: the prepared model (a wrapped model is unwrapped with `accelerator.unwrap_model`).
        accelerator: the run's `Accelerator`.

    Returns:
        True when the weights were re-tied, False otherwise.
    """
    if accelerator.distributed_type != DistributedType.XLA:
        return False
    accelerator.unwrap_model(model).tie_weights()
    return True

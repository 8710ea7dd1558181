"""The loss of an optimizer step under gradient accumulation: a mean over the items (examples, or label tokens) of
the whole accumulation window on all processes, not a mean of per-micro-batch means.

What `accelerator.backward(loss)` alone gives: each micro-batch's *mean* loss divided by A = --gradient_accumulation_
steps, averaged over the N processes by DDP. That is the window's mean only when every micro-batch of every process
holds as many items. It is not when
- the epoch's last window is shorter (m < A micro-batches): its gradient is still divided by A, so the step carries
  m / A of the gradient it should (with A = 2 and 5 micro-batches, the third update has half its weight);
- the loss is a mean over tokens (causal / masked LM, token classification, seq2seq) and micro-batches hold different
  numbers of label tokens: a micro-batch with few tokens weighs as much as one with many (the bug that transformers
  fixed in 2024 with `num_items_in_batch`; accelerate's `gradient_accumulation_for_autoregressive_models` example).

The fix, the one run_wav2vec2_pretraining has used for its masked frames since it was written: each micro-batch
backpropagates its loss *summed* over its items S_{b,p} (the model's mean times its item count); at the window's end
the items of the window are summed over processes (one all-reduce) and the gradients multiplied by
`gradient_scale(N, A, M)` = N x A / M, which turns them into the gradient of (sum of all S) / M (derivation in
`gradient_scale`). Without prefetching the window's batches (the accelerate example's way), and exact for a short last
window. Under DeepSpeed the engine's gradients cannot be rescaled after the backward pass: `TrainingRun.summed_loss`
then backpropagates the mean, as before (logged once as a warning).
"""

import torch

IGNORE_INDEX = -100  # the label that transformers' losses skip


def gradient_scale(num_processes, gradient_accumulation_steps, total_items):
    """The factor that turns the accumulated gradients into those of the mean loss per item of the whole optimizer
    step.

    Each micro-batch b on process p backpropagates its loss summed over its items, S_{b,p};
    `accelerator.backward` divides it by A = gradient_accumulation_steps and DDP averages the gradients over the N
    processes, so after the window every parameter's gradient is

        g = (1 / N) sum_p (1 / A) sum_b dS_{b,p}/dw.

    The loss we want is L = (sum_{b,p} S_{b,p}) / M, M = sum_{b,p} M_{b,p} the items of the window on all processes,
    whose gradient is

        dL/dw = g x N x A / M.

    A window with fewer than A micro-batches (the end of an epoch) is still divided by A by accelerate, so the same
    factor holds. With M = 0 (no item anywhere) every S is 0 and so is the gradient: the factor is 0.

    Returns:
        float N x A / M, or 0.0 when M is 0.
    """
    total_items = float(total_items)
    return num_processes * gradient_accumulation_steps / total_items if total_items > 0 else 0.0


def scale_gradients(parameters, factor):
    """Multiplies the gradient of every parameter that has one by `factor` (a float, or a 0-d tensor on the
    gradients' device: no host sync), in place (before clipping and the optimizer step; under fp16 the gradients
    are still loss-scaled, which commutes with a constant factor)."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if grads:
        torch._foreach_mul_(grads, factor)


def count_examples(batch):
    """Items of an example-level loss (classification, QA, images, audio): the batch's examples, dim 0 of its first
    tensor. Returns a 0-d int64 tensor on the batch's device."""
    first = next(v for v in batch.values() if torch.is_tensor(v))
    return torch.tensor(first.shape[0], device=first.device)


def label_tokens(shift=0):
    """Items of a token-level loss: the labels that the loss counts (not `IGNORE_INDEX`).

    Args:
        shift: 1 for causal language models, whose loss predicts token t + 1 from tokens <= t and so skips each
            row's first label (transformers' `ForCausalLMLoss`); 0 for masked LM, token classification and
            sequence-to-sequence models (their labels are not shifted inside the loss).

    Returns:
        function batch -> 0-d int64 tensor, the count of `batch["labels"][..., shift:]` != -100.
    """
    def count(batch):
        return (batch["labels"][..., shift:] != IGNORE_INDEX).sum()

    count.__name__ = f"label_tokens(shift={shift})"
    return count

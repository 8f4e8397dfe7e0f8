"""The learner's cache of frozen layers: hidden states at the input of the first trainable block.

With `learner.train_top_layers: n`, the bottom blocks (and the embeddings) are frozen, so their output for a sample
is the same in the no-grad pass and in every optimizer pass. The no-grad pass keeps each sample's hidden states at
the input of block L-n (a forward pre-hook), unpadded; the optimizer passes run only the top n blocks, the final
norm and the head from them.

The top blocks run through the model's own forward: `base_model` is given, for the call, a ModuleList of only the
top blocks, and `inputs_embeds=` the cached states. For a Llama-family model that is exactly the full pass from
block L-n on: position ids are `arange(T)` in both (right padding, as `pad_tokens` pads), the rotary embedding and
the causal/padding mask are built from the same positions and attention mask, and the layer loop takes what it is
given (`layers[:num_hidden_layers]`). A model whose forward adds something to `inputs_embeds` (GPT-2 adds `wpe`)
would be wrong this way; `Learner` therefore compares the cached path with the full one on its first micro-batch
and keeps the full forward if they differ (`CHECK_ATOL`). What a comparison on one batch cannot see is refused up
front by `cache_start`: per-layer attention types that would shift (`config.layer_types`), dropout in the frozen
part (the optimizer passes run in train mode, where the frozen blocks' output would be random).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

# Largest |difference| in log-prob or entropy (nats) between the cached and the full path on the first micro-batch.
# The two run the same operations on the same inputs for the top blocks (bitwise equal in practice, bf16 autocast
# included); a path that is wrong differs by far more.
CHECK_ATOL = 1e-4


def _layers_slot(model: torch.nn.Module) -> tuple[str, torch.nn.ModuleList]:
    """(attribute name, the stack of transformer blocks) of the base model: Llama/Mistral/Qwen `layers`, GPT-2 `h`."""
    base = model.base_model
    for name in ("layers", "h", "blocks"):
        layers = getattr(base, name, None)
        if isinstance(layers, torch.nn.ModuleList):
            return name, layers
    raise ValueError(f"cannot find the decoder layers of {type(model).__name__} to train only the top ones")


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The stack of transformer blocks (Llama/Mistral/Qwen `layers`, GPT-2 `h`)."""
    return _layers_slot(model)[1]


def cache_start(model: torch.nn.Module) -> tuple[int | None, str]:
    """(index of the first trainable block, "") when everything below it is frozen, else (None, why not)."""
    try:
        layers = decoder_layers(model)
    except ValueError as exc:
        return None, str(exc)
    trainable = [i for i, block in enumerate(layers) if any(p.requires_grad for p in block.parameters())]
    if not trainable or trainable[0] == 0:
        return None, "nothing below the trained blocks is frozen"
    k = trainable[0]
    top = {id(p) for block in layers[k:] for p in block.parameters()}
    below = [n for n, p in model.base_model.named_parameters() if id(p) not in top and p.requires_grad]
    # The final norm is trainable but runs after the blocks; anything else trainable outside the top blocks
    # (embeddings, a tied head) feeds the frozen part, whose output would then change between passes.
    below = [n for n in below if not n.startswith(("norm.", "ln_f.", "final_layernorm."))]
    if below:
        return None, f"parameters below block {k} are trained ({below[0]})"
    types = getattr(model.config, "layer_types", None)
    if types is not None and list(types[k:]) != list(types[: len(layers) - k]):
        # the layer loop picks each layer's mask by its position in the loop, which the cut would shift
        return None, "config.layer_types differ between the top blocks and the first ones"
    frozen = [m for block in layers[:k] for m in block.modules()]
    frozen += [m for n, m in model.base_model.named_children() if n != _layers_slot(model)[0]]
    if any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in frozen) or any(
        float(getattr(model.config, a, 0.0) or 0.0) > 0 for a in ("attention_dropout", "hidden_dropout")
    ):
        return None, "the frozen part uses dropout in training, so its output is not the same in every pass"
    return k, ""


@contextmanager
def capture_inputs(model: torch.nn.Module, k: int) -> Iterator[list[torch.Tensor]]:
    """Within the block, every forward of `model` appends the hidden states entering block `k` to the yielded list."""
    seen: list[torch.Tensor] = []

    def hook(_module, args, kwargs):
        seen.append(args[0] if args else kwargs["hidden_states"])

    handle = decoder_layers(model)[k].register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield seen
    finally:
        handle.remove()


def unpad(states: torch.Tensor, lengths: list[int]) -> list[torch.Tensor]:
    """Row r of a right-padded [B, T, H] tensor, its first lengths[r] positions, as its own tensor."""
    return [states[r, :n].detach().clone() for r, n in enumerate(lengths)]


def pad_states(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    """Right-pad per-sample [n, H] states to [B, width, H] with zeros (padded positions are never attended to by
    a real position under a causal mask, and never reach the loss)."""
    out = rows[0].new_zeros(len(rows), width, rows[0].shape[-1])
    for r, s in enumerate(rows):
        out[r, : s.shape[0]] = s
    return out


def top_hidden(model: torch.nn.Module, k: int, states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The last hidden state (after the final norm) from `states` entering block `k`: blocks k.. only."""
    base = model.base_model
    name, full = _layers_slot(model)
    setattr(base, name, torch.nn.ModuleList(list(full)[k:]))  # the same block objects: their weights and hooks
    try:
        return base(inputs_embeds=states, attention_mask=attention_mask, use_cache=False).last_hidden_state
    finally:
        setattr(base, name, full)

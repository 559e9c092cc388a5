"""A model's blocks run one at a time on a batch of real images, the residual stream kept between them.

A layer-by-layer fit on real images needs, for layer l, the Q/K input layer l receives once layers
0..l-1 are initialised. Re-running the model up to l for every layer costs L(L+1)/2 block passes (78
for ViT-Ti); keeping the stream costs L. `BlockRunner` captures what enters the first block (patch
embedding, position embedding, prefix tokens: whatever the model does before its blocks), then runs
each block on the kept stream: `qk_input(i)` stops block i at its attention module and returns the
Q/K input it receives (norm1 / LN, or the blend of LN(x) and P); `advance(i)` runs the whole block
with its current weights. Because later layers never change earlier ones, the Q/K input of layer i
read after layers 0..i-1 are initialised is exactly the final model's (`convinit.init.measure` checks
it against a plain forward pass).

The blocks are called as the model calls its first block (same extra arguments for every block):
true of convinit's SimpleViT, timm's VisionTransformer family and transformers' ViT encoder.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn as nn

from convinit.init.attention_sites import AttentionSlot


class _StopForward(Exception):
    """Raised by a hook to end a forward pass once the wanted input is known."""


class BlockRunner:
    """The residual stream of `images` between the blocks of `slots` (eval mode, no gradients).

    Tensors stay on the model's device in the model's dtype; call `close()` (or use it as a context
    manager) to restore the model's training mode.
    """

    def __init__(self, model: nn.Module, slots: Sequence[AttentionSlot], images: torch.Tensor):
        self.model, self.slots = model, slots
        self.was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        self.stream_key: str | None = None  # the stream's keyword when the first block got it by name
        self.stream, self.args, self.kwargs = self._first_block_input(images.to(device))

    def _first_block_input(self, images: torch.Tensor) -> tuple[torch.Tensor, tuple, dict]:
        seen: dict[str, Any] = {}

        def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
            seen["args"], seen["kwargs"] = args, kwargs
            raise _StopForward

        handle = self.slots[0].block.register_forward_pre_hook(hook, with_kwargs=True)
        try:
            with torch.no_grad():
                self.model(images)
        except _StopForward:
            pass
        finally:
            handle.remove()
        if "args" not in seen:
            raise RuntimeError(f"{type(self.model).__name__}'s forward pass never reached its first block")
        args, kwargs = seen["args"], dict(seen["kwargs"])
        if args:
            return args[0], args[1:], kwargs
        self.stream_key = next(iter(kwargs))  # e.g. hidden_states=...
        return kwargs.pop(self.stream_key), (), kwargs

    def _call(self, index: int) -> Any:
        block = self.slots[index].block
        with torch.no_grad():
            if self.stream_key is None:
                return block(self.stream, *self.args, **self.kwargs)
            return block(*self.args, **{self.stream_key: self.stream}, **self.kwargs)

    def qk_input(self, index: int) -> torch.Tensor:
        """The (B, T, D) Q/K input of slot `index`'s attention, given the stream at block `index`."""
        seen: list[torch.Tensor] = []

        def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
            seen.append(self.slots[index].qk_input_of(args, kwargs).detach())
            raise _StopForward

        handle = self.slots[index].module.register_forward_pre_hook(hook, with_kwargs=True)
        try:
            self._call(index)
        except _StopForward:
            pass
        finally:
            handle.remove()
        return seen[0]

    def advance(self, index: int) -> None:
        """Run block `index` (with its current weights) on the stream."""
        out = self._call(index)
        self.stream = out[0] if isinstance(out, tuple | list) else out

    def close(self) -> None:
        self.model.train(self.was_training)

    def __enter__(self) -> BlockRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

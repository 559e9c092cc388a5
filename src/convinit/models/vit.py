"""SimpleViT (docs/method.md §2), the paper-1 baseline, and paper 1's Models I, II and III.

patchify -> LN -> Linear -> LN, plus a fixed 2-D sin-cos position embedding P; pre-norm blocks with
bias-free Q/K/V; final LN; mean pooling; linear head. No class token.

Where the attention logits come from is one option, `qk_input`:
- "x" (default): SimpleViT. Q, K and V all come from LN(x); P is added to the residual stream once.
- "blend": Models I and II. Q/K input = alpha * LN(x) + (1 - alpha) * P in every layer, V from LN(x).
  alpha = 0.5 is Model I, alpha = 0 Model II (input-independent maps), Table 3 sweeps 0 .. 0.5. The
  paper puts P into the logits *instead of* the residual stream, so `pos_embed` defaults to "none"
  here; pos_embed="input" adds P to the stream as well.
- "free": Model III. Per-head logit factors Q_h (N x r) and K_h (r x N), r = dim_head, and
  A_h = softmax(Q_h K_h * scale); no P anywhere (pos_embed defaults to "none").
`freeze_attention=True` stops whatever forms the maps (the Q/K projection, or the free factors) from
training: Table 2's "untrained" rows.

Beyond the papers, two opt-in options of the blend keep a fitted init's position bias through training
(docs/method.md §8, docs/training.md): `content_warmup=N` ramps the content's weight in the Q/K input
from 0 to alpha over the first N optimiser steps (P keeps its weight 1 - alpha), and
`content_projection=True` removes from the content the input directions the Q/K projection holds when
training starts (its fitted directions), so content reaches the logits only through directions it learns.
The init schemes in `convinit.init` read `model.grid`, `model.attention_layers()` and
`model.logit_position_embedding()`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn

from convinit.errors import ConfigError
from convinit.models.layers import (
    Attention,
    FeedForward,
    check_positive,
    fitted_direction_projector,
    pair,
    patch_grid,
    patchify,
    posemb_sincos_2d,
)
from convinit.models.pretrained import PretrainedMixin
from convinit.models.registry import FAMILIES, Family

QK_INPUTS = ("x", "blend", "free")
POS_EMBEDS = ("input", "none")


class FreeAttention(nn.Module):
    """Model III attention (docs/method.md §2): maps are free per-head parameters, V comes from the input.

    The factors start normal with std 3^-1/2, the std of q and k entries that a default-initialised
    nn.Linear gives on LayerNorm-ed input, so random Model III maps look like random SimpleViT maps.
    """

    def __init__(self, dim: int, tokens: int, heads: int, dim_head: int, attn_scale: float | None = None):
        super().__init__()
        inner = heads * dim_head
        self.heads = heads
        self.dim_head = dim_head
        self.tokens = tokens
        self.scale = float(attn_scale) if attn_scale is not None else dim_head**-0.5
        self.q_factors = nn.Parameter(torch.randn(heads, tokens, dim_head) * 3**-0.5)  # (H, N, r)
        self.k_factors = nn.Parameter(torch.randn(heads, dim_head, tokens) * 3**-0.5)  # (H, r, N)
        self.to_v = nn.Linear(dim, inner, bias=False)
        self.to_out = nn.Linear(inner, dim, bias=False)
        self.record = False
        self.attention_map: torch.Tensor | None = None

    def maps(self) -> torch.Tensor:
        """softmax(Q_h K_h * scale) for every head, (H, N, N): the same for every image."""
        return torch.softmax((self.q_factors @ self.k_factors) * self.scale, dim=-1)

    def forward(self, x: torch.Tensor, qk_input: torch.Tensor | None = None) -> torch.Tensor:
        batch, tokens, _ = x.shape
        attn = self.maps()  # (H, N, N)
        v = self.to_v(x).reshape(batch, tokens, self.heads, self.dim_head).transpose(1, 2)  # (B, H, N, d)
        out = attn @ v  # (B, H, N, d)
        if self.record:
            self.attention_map = attn.detach().expand(batch, -1, -1, -1)  # (B, H, N, N)
        return self.to_out(out.transpose(1, 2).flatten(2))  # (B, N, H*d) -> (B, N, D)


class Block(nn.Module):
    """Pre-norm transformer block: x + Attn(LN(x)), then x + MLP(x) (the MLP holds its own LN).

    With `alpha` set (qk_input "blend"), Q/K see alpha * LN(x) + (1 - alpha) * P and V sees LN(x);
    `content` replaces alpha as the content's weight (content_warmup), and `content_projector` (D, D),
    when set, is applied to LN(x) before it enters Q/K (content_projection).
    """

    def __init__(
        self, dim: int, attn: nn.Module, mlp_dim: int, alpha: float | None = None, project: bool = False
    ):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.attn = attn
        self.mlp = FeedForward(dim, mlp_dim)
        self.alpha = alpha
        self.register_buffer("content_projector", torch.eye(dim) if project else None)

    def forward(
        self, x: torch.Tensor, logit_pos: torch.Tensor | None = None, content: torch.Tensor | None = None
    ) -> torch.Tensor:
        h = self.norm(x)
        qk = None
        if self.alpha is not None and logit_pos is not None:
            seen = h if self.content_projector is None else h @ self.content_projector  # (B, N, D)
            weight = self.alpha if content is None else content
            qk = weight * seen + (1.0 - self.alpha) * logit_pos  # (B, N, D)
        x = x + self.attn(h, qk_input=qk)
        return x + self.mlp(x)


def check_vit_options(qk_input: str, alpha: float | None, pos_embed: str | None) -> tuple[float | None, str]:
    """Validate the Model I/II/III options; returns (alpha, pos_embed) with their defaults filled in."""
    if qk_input not in QK_INPUTS:
        raise ConfigError(
            f"qk_input must be one of {', '.join(QK_INPUTS)} (x = SimpleViT, blend = Models I/II, "
            f"free = Model III), got {qk_input!r}"
        )
    if alpha is not None and qk_input != "blend":
        raise ConfigError(
            f"alpha only applies to qk_input='blend' (got qk_input={qk_input!r}); "
            "drop alpha or set qk_input: blend"
        )
    if qk_input == "blend":
        alpha = 0.5 if alpha is None else alpha
        if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0.0 <= alpha <= 1.0:
            raise ConfigError(
                f"alpha must be a number in [0, 1] (0 = Model II, 0.5 = Model I), got {alpha!r}"
            )
        alpha = float(alpha)
    if pos_embed is None:
        pos_embed = "input" if qk_input == "x" else "none"
    if pos_embed not in POS_EMBEDS:
        raise ConfigError(
            f"pos_embed must be 'input' (add P to the patch embeddings) or 'none', got {pos_embed!r}"
        )
    return alpha, pos_embed


def check_content_options(qk_input: str, content_warmup: int, content_projection: bool) -> None:
    """content_warmup / content_projection act on the content part of a blended Q/K input only."""
    if isinstance(content_warmup, bool) or not isinstance(content_warmup, int) or content_warmup < 0:
        raise ConfigError(
            f"content_warmup must be a whole number of steps, 0 or more, got {content_warmup!r}"
        )
    if not isinstance(content_projection, bool):
        raise ConfigError(f"content_projection must be true or false, got {content_projection!r}")
    if (content_warmup or content_projection) and qk_input != "blend":
        raise ConfigError(
            "content_warmup and content_projection act on the blended Q/K input "
            f"(got qk_input={qk_input!r}); set qk_input: blend or drop them"
        )


class SimpleViT(PretrainedMixin, nn.Module):
    """The SimpleViT of Beyer et al. as used by paper 1, with Models I/II/III (docs/method.md §2)."""

    def __init__(
        self,
        *,
        num_classes: int,
        img_size: int | tuple[int, int],
        in_chans: int,
        patch_size: int,
        dim: int,
        depth: int,
        heads: int,
        dim_head: int,
        mlp_dim: int,
        attn_scale: float | None = None,
        qk_input: str = "x",
        alpha: float | None = None,
        pos_embed: str | None = None,
        freeze_attention: bool = False,
        content_warmup: int = 0,
        content_projection: bool = False,
    ):
        super().__init__()
        check_positive(dim=dim, depth=depth, heads=heads, dim_head=dim_head, mlp_dim=mlp_dim)
        self.alpha, self.pos_embed = check_vit_options(qk_input, alpha, pos_embed)
        check_content_options(qk_input, content_warmup, content_projection)
        # optimiser steps taken in the warm-up, saved with the weights so a resumed run continues the ramp;
        # it starts complete (the init and a model used outside training see alpha), start_training resets it
        self.content_warmup = content_warmup
        self.register_buffer("content_steps", torch.tensor(float(content_warmup)) if content_warmup else None)
        self.qk_input = qk_input
        self.img_size = pair(img_size)
        self.in_chans = in_chans
        self.patch_size = patch_size
        self.grid = patch_grid(img_size, patch_size)  # (rows, cols) of patches
        tokens = self.grid[0] * self.grid[1]
        patch_dim = in_chans * patch_size * patch_size
        # LN over a 1-value patch (one grey pixel) maps every input to its bias and erases the image,
        # so SimpleViT's patch LN is skipped there (digits with patch 1); elsewhere it is as in
        # docs/method.md §2.
        self.patch_embed = nn.Sequential(
            nn.LayerNorm(patch_dim) if patch_dim > 1 else nn.Identity(),
            nn.Linear(patch_dim, dim),
            nn.LayerNorm(dim),
        )
        self.register_buffer("pos_embedding", posemb_sincos_2d(*self.grid, dim), persistent=False)

        def attention() -> nn.Module:
            if qk_input == "free":
                return FreeAttention(dim, tokens, heads, dim_head, attn_scale)
            return Attention(dim, heads=heads, dim_head=dim_head, attn_scale=attn_scale)

        blocks = (Block(dim, attention(), mlp_dim, self.alpha, content_projection) for _ in range(depth))
        self.blocks = nn.ModuleList(blocks)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)
        self.freeze_attention = bool(freeze_attention)
        if freeze_attention:
            for attn in self.attention_layers():
                for param in logit_parameters(attn):
                    param.requires_grad_(False)

    def attention_layers(self) -> list[nn.Module]:
        """The attention module of each block, first to last."""
        return [block.attn for block in self.blocks]

    def logit_position_embedding(self) -> torch.Tensor | None:
        """P as it enters the attention logits (qk_input "blend"), else None. (N, D)"""
        return self.pos_embedding if self.qk_input == "blend" else None

    def forward_features(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(patchify(images, self.patch_size))  # (B, N, D)
        if self.pos_embed == "input":
            x = x + self.pos_embedding
        logit_pos = self.logit_position_embedding()
        content = None
        if self.content_steps is not None:  # alpha * min(1, steps / N), on the device
            content = self.alpha * (self.content_steps / self.content_warmup).clamp(max=1.0)
        for block in self.blocks:
            x = block(x, logit_pos, content)
        return self.norm(x)

    @torch.no_grad()
    def start_training(self) -> Callable[[], None] | None:
        """Called by the trainer when it builds the optimiser, after the init: fixes content_projection's
        projectors from the Q/K weights as they are now and restarts content_warmup's ramp. Returns what
        to call after each optimiser step (the ramp's step), or None. A resumed run then loads both
        buffers from its checkpoint."""
        for block in self.blocks:
            if block.content_projector is not None:
                block.content_projector.copy_(fitted_direction_projector(block.attn.to_qk.weight))
        if self.content_steps is None:
            return None
        self.content_steps.zero_()
        return self.advance_content_warmup

    @torch.no_grad()
    def advance_content_warmup(self) -> None:
        self.content_steps.add_(1.0)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.forward_features(images).mean(dim=1))


def logit_parameters(attn: nn.Module) -> list[nn.Parameter]:
    """The parameters that form an attention layer's maps: Q/K projection, or Model III's factors."""
    if isinstance(attn, FreeAttention):
        return [attn.q_factors, attn.k_factors]
    return [attn.to_qk.weight]


# a SimpleViT preset lets its caller set every argument (Models I/II/III are options, not presets)
FAMILIES.add("vit", Family(SimpleViT))

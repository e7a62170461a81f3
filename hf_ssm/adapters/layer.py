"""The trainable part of an SSM adapter: RMSNorm -> SSM mixer -> zero-initialised projection (docs/design.md §10).

The mixer is built from a HybridSSMConfig whose `hidden_size` is the base model's width, through
`SSM_MIXER_CLASSES`, so every registered mixer works. The adapter runs in float32 whatever the base's dtype
(it is small, and the scans accumulate in float32 anyway); its output is cast back to the hidden states' dtype.
"""

from __future__ import annotations

import torch
from torch import nn

from ..modeling import PAPER_PD_SSM_LAYER, SSM_MIXER_CLASSES, HybridSSMConfig
from ..modeling.attention import HybridSSMRMSNorm
from .config import SSMAdapterConfig

# near_identity_init of a PD-SSM mixer: a diagonal added to every dictionary matrix (P = argmax down each column
# is then I at first, and tokens learn to leave it), and the output biases of the magnitude / phase MLPs:
# |D| = sigmoid(10) ~ 1 - 5e-5, arg D = 2 pi sigmoid(-10) ~ 3e-4 rad, so a thousand filler tokens barely move
# the state. Everything stays trainable. A D learnt from a moderate start (bias +-6) fits the training lengths
# quickly but stays too imprecise to extrapolate; the exact permutations P do not drift.
# Settings in `mixer_settings` win over these.
PD_NEAR_IDENTITY_SETTINGS = {
    "pd_ssm_dictionary_diagonal_init": 1.0,
    "pd_ssm_magnitude_bias_init": 10.0,
    "pd_ssm_phase_bias_init": -10.0,
}


@torch.no_grad()
def set_input_statistics(adapter: nn.Module, features: torch.Tensor) -> None:
    """Fill an adapter's `input_mean` / `input_scale` buffers from base features (n, d): the per-feature mean and
    standard deviation (floored at 1e-6 of the largest). Shared by every adapter kind with `standardize_input`."""
    if not adapter.config.standardize_input:
        raise ValueError("set_input_statistics needs an adapter with `standardize_input=True`")
    if features.dim() != 2 or features.shape[1] != adapter.input_mean.shape[0] or features.shape[0] < 2:
        raise ValueError(f"expected features (n >= 2, {adapter.input_mean.shape[0]}), got {tuple(features.shape)}")
    features = features.to(adapter.input_mean.device, torch.float32)
    std = features.std(dim=0)
    adapter.input_mean.copy_(features.mean(dim=0))
    adapter.input_scale.copy_(std.clamp_min(1e-6 * float(std.max())))


def mixer_config(config: SSMAdapterConfig, hidden_size: int) -> HybridSSMConfig:
    """The one-layer HybridSSMConfig the adapter's mixer is built from: a PD-SSM adapter starts from the paper's
    layer (PAPER_PD_SSM_LAYER, the config's defaults when the adapters were designed), then its own settings."""
    near_identity = config.near_identity_init and config.mixer == "pd_ssm"
    settings = {**PAPER_PD_SSM_LAYER, **(PD_NEAR_IDENTITY_SETTINGS if near_identity else {}), **config.mixer_settings}
    return HybridSSMConfig(
        vocab_size=1,  # unused: the mixer never sees token ids
        hidden_size=hidden_size,
        intermediate_size=1,
        num_hidden_layers=1,
        mixers=[config.mixer],
        **settings,
    )


class HeadwiseClassifier(nn.Module):
    """One linear readout per head: features (..., H, F) -> logits (..., H, C), logits_h = x_h W_h + b_h.

    W_h starts N(0, 1 / F) so that each head's logits start O(1) on a one-hot state, b_h at zero."""

    def __init__(self, heads: int, features: int, classes: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(heads, features, classes) / features**0.5)
        self.bias = nn.Parameter(torch.zeros(heads, classes))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return torch.einsum("...hf,hfc->...hc", features, self.weight) + self.bias


class SSMAdapter(nn.Module):
    """forward(hidden_states (B, T, d), state=None, mask (B, T) bool or None, input_ids (B, T) or None)
    -> (output, final_state).

    output is the residual update W_out Mixer(Norm(h)) (B, T, d) for readout "lm_head", or class logits
    W_cls Mixer(Norm(h)) (B, T, num_labels) for readout "classifier". With `classifier_per_head` the heads'
    summed log-probabilities v (B, T, num_labels) replace the mixer's output (see `head_logits`): the classifier
    returns v, the LM-head readout W_out softmax(v) (B, T, d) with v detached (the heads learn from their own
    losses only). `state` is the mixer's recurrent state
    (None = the mixer's initial state); masked-out positions (padding) leave it unchanged. With
    `config.transition_token_ids` set, `input_ids` is required and every other token leaves it unchanged too.
    """

    def __init__(self, config: SSMAdapterConfig, hidden_size: int):
        super().__init__()
        self.config = config
        self.norm = HybridSSMRMSNorm(hidden_size, eps=config.norm_eps)
        self.mixer = SSM_MIXER_CLASSES[config.mixer](mixer_config(config, hidden_size), 0)
        # parameters the mixer's own settings keep fixed (e.g. pd_ssm_output_trainable=False): never trainable either
        self._fixed_by_mixer = {f"mixer.{n}" for n, p in self.mixer.named_parameters() if not p.requires_grad}
        if config.classifier_per_head:
            mixer = self.mixer
            self.classifier = HeadwiseClassifier(mixer.num_heads, 2 * mixer.head_state_size, config.num_labels)
            # the heads' readouts replace the mixer's output map: C and the skip get no gradient, so keep them fixed
            self._fixed_by_mixer |= {
                f"mixer.{n}" for n, _ in mixer.named_parameters() if n in ("out_proj.weight", "skip")
            }
        elif config.readout == "classifier":
            self.classifier = nn.Linear(hidden_size, config.num_labels)
        if config.readout == "lm_head":
            # per head: the vote's class probabilities are what gets written
            width = config.num_labels if config.classifier_per_head else hidden_size
            self.out_proj = nn.Linear(width, hidden_size, bias=False)
            # Zero init: a freshly attached adapter adds exactly 0, so the base's logits are bit-identical.
            nn.init.zeros_(self.out_proj.weight)
        self.set_trainable(True)  # also raises on a frozen_mixer_parameters name that matches nothing
        if config.standardize_input:
            self.register_buffer("input_mean", torch.zeros(hidden_size))
            self.register_buffer("input_scale", torch.ones(hidden_size))
        ids = config.transition_token_ids
        # not persistent: the ids live in adapter_config.json, the weights file holds weights only
        self.register_buffer("transition_ids", None if ids is None else torch.tensor(ids), persistent=False)

    def frozen_parameter_names(self) -> list[str]:
        """Mixer parameters named (or prefixed) by `config.frozen_mixer_parameters`, as `mixer.<name>`."""
        out = []
        names = [n for n, _ in self.mixer.named_parameters()]
        for prefix in self.config.frozen_mixer_parameters:
            matched = [n for n in names if n == prefix or n.startswith(prefix + ".")]
            if not matched:
                raise ValueError(
                    f"`frozen_mixer_parameters` entry {prefix!r} matches no parameter of the {self.config.mixer} "
                    f"mixer; its parameters: {names}"
                )
            out.extend(f"mixer.{n}" for n in matched)
        return out

    def set_trainable(self, trainable: bool = True) -> None:
        """requires_grad on every parameter except the mixer parameters that are never trainable: those named by
        `frozen_mixer_parameters` and those the mixer's settings keep fixed (`pd_ssm_output_trainable=False`)."""
        frozen = set(self.frozen_parameter_names()) | self._fixed_by_mixer
        for name, param in self.named_parameters():
            param.requires_grad_(trainable and name not in frozen)

    @torch.no_grad()
    def set_input_statistics(self, features: torch.Tensor) -> None:
        """Set `input_mean` / `input_scale` from base features (n, d) (standardize_input only): the per-feature
        mean and standard deviation (floored at 1e-6 of the largest, so a constant feature does not blow up)."""
        set_input_statistics(self, features)

    def step_mask(self, mask: torch.Tensor | None, input_ids: torch.Tensor | None) -> torch.Tensor | None:
        """(B, T) bool of the steps that may change the state (None = all): `mask`, and with
        `transition_token_ids` only the positions holding one of those tokens."""
        if self.transition_ids is None:
            return mask
        if input_ids is None:
            raise ValueError(
                "this adapter moves its state only at `transition_token_ids`, so it needs `input_ids` "
                "(a forward on `inputs_embeds` alone cannot be run through it)"
            )
        steps = torch.isin(input_ids, self.transition_ids.to(input_ids.device))
        return steps if mask is None else steps & mask.bool()

    def _mixer_input(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Norm(h) (B, T, d) in the adapter's dtype, h z-scored first with `standardize_input`."""
        h = hidden_states.to(self.norm.weight.dtype)
        if self.config.standardize_input:
            h = (h - self.input_mean) / self.input_scale
        return self.norm(h).to(self.norm.weight.dtype)

    def head_logits(
        self,
        hidden_states: torch.Tensor,
        state=None,
        mask: torch.Tensor | None = None,
        input_ids: torch.Tensor | None = None,
    ):
        """`classifier_per_head` only: (every head's own class logits (B, T, H, num_labels) float32, final state).
        forward's vote is their log-softmax summed over H; training scores each head on its own. They are the
        output of `self.classifier`, so a forward hook there sees them inside a whole model's forward too."""
        if not self.config.classifier_per_head:
            raise ValueError("head_logits needs an adapter with `classifier_per_head=True`")
        mask = self.step_mask(mask, input_ids)
        with torch.autocast(device_type=hidden_states.device.type, enabled=False):
            u = self._mixer_input(hidden_states)
            features, final_state = self._state_features(u, state, mask)
            return self.classifier(features.to(self.norm.weight.dtype)), final_state

    def _scans_steps_alone(self, u: torch.Tensor, steps: torch.Tensor | None) -> bool:
        """Whether the mixer's scan of u (B, T, d) runs over `steps` alone (`_scan_of_steps`): a PD-SSM mixer whose
        state moves only at `transition_token_ids`, on more than one token (a one-token decode step keeps the
        mixer's own fused step)."""
        return (
            hasattr(self.mixer, "state_features")
            and self.transition_ids is not None
            and steps is not None
            and u.shape[1] > 1
        )

    def _state_features(self, u: torch.Tensor, state, steps: torch.Tensor | None):
        """The PD-SSM mixer's `state_features` of u (B, T, d) when only `steps` (B, T) bool (None: all) move the
        state, through `_scan_of_steps` where `_scans_steps_alone`."""
        if self._scans_steps_alone(u, steps):
            return self._scan_of_steps(u, state, steps)
        return self.mixer.state_features(u, state, steps)

    def _scan_of_steps(self, u: torch.Tensor, state, steps: torch.Tensor):
        """(features (B, T, H, 2N), final state): `mixer.state_features(u, state, steps)`, with the scan run over
        the steps alone.

        A step outside `steps` is the identity, so the state at position t is the state after the last step at or
        before t. The scan therefore runs over (B, 1 + L) slots, L the most steps of any row: slot 0 an identity step
        (its features are the start state's), slots 1..n_b row b's steps in order, the rest identity steps; every
        position then reads slot (number of steps up to it). With one step per sentence that is ~10x shorter than T
        on the stories of docs/adapter.md, and gives the same states, final state and gradients."""
        batch, _, width = u.shape
        counts = steps.sum(1)  # (B,)
        longest = int(counts.max())
        # the positions of each row's steps first, in order (a stable sort of "not a step")
        order = torch.sort((~steps).to(torch.uint8), dim=1, stable=True).indices[:, :longest]
        slots = torch.arange(longest + 1, device=u.device)
        compact = torch.cat([u.new_zeros(batch, 1, width), u.gather(1, order[..., None].expand(-1, -1, width))], 1)
        moves = (slots > 0) & (slots <= counts[:, None])  # (B, 1 + L)
        features, final_state = self.mixer.state_features(compact, state, moves)
        read = steps.long().cumsum(1)  # (B, T): the slot each position reads
        return features.gather(1, read[..., None, None].expand(-1, -1, *features.shape[2:])), final_state

    def forward(
        self,
        hidden_states: torch.Tensor,
        state=None,
        mask: torch.Tensor | None = None,
        input_ids: torch.Tensor | None = None,
    ):
        if self.config.classifier_per_head:
            logits, final_state = self.head_logits(hidden_states, state, mask, input_ids)
            vote = logits.log_softmax(-1).sum(-2)
            if self.config.readout == "classifier":
                return vote, final_state
            # Detached: the LM head's loss trains W_out alone and each head learns from its own cross-entropy only.
            # Through the vote, that loss reaches every head at full weight (each head's own loss is averaged over
            # the heads) and trains them jointly, as one readout of all heads does: cycle navigation then stayed at
            # chance on the training lengths (docs/adapter.md).
            with torch.autocast(device_type=hidden_states.device.type, enabled=False):
                return self.out_proj(vote.detach().softmax(-1)).to(hidden_states.dtype), final_state
        mask = self.step_mask(mask, input_ids)
        dtype = self.norm.weight.dtype
        with torch.autocast(device_type=hidden_states.device.type, enabled=False):
            u = self._mixer_input(hidden_states)
            if self._scans_steps_alone(u, mask):
                features, final_state = self._scan_of_steps(u, state, mask)
                mixed = self.mixer.read_out(features, u)
            else:
                mixed, final_state = self.mixer(u, state=state, mask=mask)
            if self.config.readout == "lm_head":
                return self.out_proj(mixed.to(dtype)).to(hidden_states.dtype), final_state
            return self.classifier(mixed.to(dtype)), final_state


__all__ = ["HeadwiseClassifier", "SSMAdapter", "mixer_config"]

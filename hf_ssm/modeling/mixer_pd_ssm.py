"""PD-SSM mixer (DESIGN §4): transition A_t = P_t D_t, P column-one-hot, D complex diagonal.

Per head (H heads, state N each), with u_t the layer input (B, T, d):
  s_t   = softmax(W_s u_t)                   selection over a dictionary of K matrices
  M_t   = sum_k s_{t,k} M_k                  soft N x N matrix
  P_t   = hardmax of M_t down each column    forward; backward: softmax(M_t / tau) down each column
  |D_t| = sigmoid(MLP_mag(u_t)), arg D_t = 2 pi sigmoid(MLP_phase(u_t))
          (config.pd_ssm_diagonal: "complex" as here; "magnitude": arg D_t = 0; "unit": D_t = 1)
  x_t   = P_t D_t x_{t-1} + B u_t,   y_t = Re(C x_t) + D_skip * u_t

The scan sees P only as indices (idx_t[j] = argmax_i M_t[i, j]); Re(C x) is a real linear map of
[Re x, Im x]. Everything from the selection logits on runs in float32 / complex64, also under bf16 autocast.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .configuration_hybrid_ssm import HybridSSMConfig
from .scan_dispatch import pd_generated_scan, resolve_backend
from .scan_pd import pd_scan


class HeadwiseMLP(nn.Module):
    """Linear(d, H*W) -> GELU -> per-head Linear(W, out): (B, T, d) -> (B, T, H, out)."""

    def __init__(self, in_features: int, heads: int, width: int, out_features: int, bias_init: float = 0.0):
        super().__init__()
        self.heads, self.width, self.bias_init = heads, width, bias_init
        self.up = nn.Linear(in_features, heads * width)
        self.down_weight = nn.Parameter(torch.empty(heads, out_features, width))
        self.down_bias = nn.Parameter(torch.full((heads, out_features), float(bias_init)))
        nn.init.normal_(self.down_weight, std=0.02)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        h = nn.functional.gelu(self.up(u)).unflatten(-1, (self.heads, self.width))
        return torch.einsum("bthw,how->btho", h, self.down_weight) + self.down_bias


class PDSSMMixer(nn.Module):
    """PD-SSM sequence mixer.

    forward(hidden_states (B, T, d), state (B, H, N) complex64 or None, mask (B, T) bool or None)
        -> (output (B, T, d), final state (B, H, N) complex64)
    Masked-out positions (padding) get the identity transition and zero input, so they never change the state.
    state None starts from `initial_state` (config.pd_ssm_initial_state: zeros, e_0 per head, or a learned x_0).
    """

    state_dtype = torch.complex64

    def __init__(self, config: HybridSSMConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        d = config.hidden_size
        self.num_heads = h = config.pd_ssm_num_heads
        self.state_size = n = config.pd_ssm_state_size
        self.dict_size = k = config.pd_ssm_dict_size
        self.temperature = config.pd_ssm_temperature
        self.scan_backend = getattr(config, "scan_backend", "auto")
        self.initial_state_kind = getattr(config, "pd_ssm_initial_state", "zeros")
        if self.initial_state_kind == "learned":
            # x_0 as [real, imag] pairs (H, N, 2); starts at e_0 (also when HybridSSMPreTrainedModel re-initialises it)
            self.learned_initial_state = nn.Parameter(self.one_hot_initial_state())
        self.selection = nn.Linear(d, h * k, bias=False)
        self.dictionary = nn.Parameter(torch.empty(h, k, n, n))
        # Bias inits set where D starts: sigmoid(magnitude bias) = |D|, 2 pi sigmoid(phase bias) = arg D.
        # A variant without a learnt phase (or magnitude) has no MLP for it at all.
        self.diagonal_kind = getattr(config, "pd_ssm_diagonal", "complex")
        width = config.pd_ssm_mlp_width
        if self.diagonal_kind in ("complex", "magnitude"):
            self.magnitude = HeadwiseMLP(d, h, width, n, config.pd_ssm_magnitude_bias_init)
        if self.diagonal_kind == "complex":
            self.phase = HeadwiseMLP(d, h, width, n, config.pd_ssm_phase_bias_init)
        self.input_proj = nn.Linear(d, 2 * h * n, bias=False)  # complex B: real and imaginary parts
        self.output_proj = nn.Linear(2 * h * n, d, bias=False)  # Re(C x) = [C_re, -C_im] [Re x; Im x]
        self.skip = nn.Parameter(torch.ones(d))
        self.dictionary_diagonal_init = float(getattr(config, "pd_ssm_dictionary_diagonal_init", 0.0))
        nn.init.normal_(self.dictionary, std=1.0 / math.sqrt(n))
        with torch.no_grad():
            self.dictionary.diagonal(dim1=-2, dim2=-1).add_(self.dictionary_diagonal_init)

    def one_hot_initial_state(self, device=None) -> torch.Tensor:
        """e_0 in every head as [real, imag] pairs: (H, N, 2) float32."""
        x0 = torch.zeros(self.num_heads, self.state_size, 2, device=device)
        x0[:, 0, 0] = 1
        return x0

    def initial_state(self, batch_size: int, device=None) -> torch.Tensor:
        """x_0: (B, H, N) complex64; zeros, e_0 in every head, or the learned x_0 (differentiable)."""
        shape = (batch_size, self.num_heads, self.state_size)
        if self.initial_state_kind == "zeros":
            return torch.zeros(shape, dtype=self.state_dtype, device=device)
        pairs = self.learned_initial_state if self.initial_state_kind == "learned" else self.one_hot_initial_state()
        return torch.view_as_complex(pairs.float().to(device).contiguous()).expand(shape)

    def transitions(self, u: torch.Tensor):
        """Sparse transitions of input u (B, T, d).

        Returns idx (B, T, H, N) int64, dv (B, T, H, N) complex64, and p_soft (B, T, H, N, N), the
        straight-through softmax columns (None when no gradient is needed).
        """
        sel = self.selection_weights(u)
        soft = torch.einsum("bthk,hkij->bthij", sel, self.dictionary.float())
        idx = soft.argmax(dim=-2)
        p_soft = torch.softmax(soft / self.temperature, dim=-2) if soft.requires_grad else None
        return idx, self.diagonal(u), p_soft

    def selection_weights(self, u: torch.Tensor) -> torch.Tensor:
        """s_t = softmax(W_s u_t) over the dictionary: (B, T, H, K) float32."""
        batch, steps, _ = u.shape
        return torch.softmax(self.selection(u).float().view(batch, steps, self.num_heads, self.dict_size), dim=-1)

    def diagonal(self, u: torch.Tensor) -> torch.Tensor:
        """D_t: (B, T, H, N) complex64, |D| = sigmoid(MLP_mag(u)), arg D = 2 pi sigmoid(MLP_phase(u))."""
        batch, steps, _ = u.shape
        if self.diagonal_kind == "unit":
            return torch.ones(batch, steps, self.num_heads, self.state_size, dtype=self.state_dtype, device=u.device)
        magnitude = torch.sigmoid(self.magnitude(u).float())
        if self.diagonal_kind == "magnitude":
            return torch.complex(magnitude, torch.zeros_like(magnitude))
        angle = (2 * math.pi) * torch.sigmoid(self.phase(u).float())
        return torch.polar(magnitude, angle)

    def _generated_scan(self, u: torch.Tensor, x0: torch.Tensor | None, mask: torch.Tensor | None):
        """The Triton path: P generation, straight-through gradient and scan fused (pd_generated_scan),
        never storing the (B, T, H, N, N) soft matrices; equal to the torch path below."""
        batch, steps, _ = u.shape
        dv = self.diagonal(u)
        b = torch.view_as_complex(self.input_proj(u).float().view(batch, steps, self.num_heads, self.state_size, 2))
        if mask is not None:
            keep = mask.view(batch, steps, 1, 1)
            dv = torch.where(keep, dv, torch.ones((), dtype=dv.dtype, device=u.device))
            b = torch.where(keep, b, torch.zeros((), dtype=b.dtype, device=u.device))
        sel, tau = self.selection_weights(u), self.temperature
        return pd_generated_scan(sel, self.dictionary, dv, b, x0, temperature=tau, mask=mask, backend="triton")

    def forward(self, hidden_states: torch.Tensor, state: torch.Tensor | None = None, mask: torch.Tensor | None = None):
        batch, steps, _ = hidden_states.shape
        with torch.autocast(device_type=hidden_states.device.type, enabled=False):
            # Under autocast the input may be bf16 while the weights are float32: run this layer in the weights' dtype.
            u = hidden_states.to(self.selection.weight.dtype)
            if state is None and self.initial_state_kind != "zeros":
                state = self.initial_state(batch, u.device)
            if resolve_backend(self.scan_backend, u.device) == "triton":
                x0 = None if state is None else state.to(self.state_dtype)
                states, final = self._generated_scan(u, x0, mask)
                features = torch.cat([states.real, states.imag], dim=-1).reshape(batch, steps, -1)
                y = self.output_proj(features.to(self.output_proj.weight.dtype)) + self.skip * u
                return y.to(hidden_states.dtype), final
            idx, dv, p_soft = self.transitions(u)
            b = torch.view_as_complex(self.input_proj(u).float().view(batch, steps, self.num_heads, self.state_size, 2))
            if mask is not None:
                keep = mask.view(batch, steps, 1, 1)
                eye = torch.arange(self.state_size, device=u.device)
                idx = torch.where(keep, idx, eye)
                dv = torch.where(keep, dv, torch.ones((), dtype=dv.dtype, device=u.device))
                b = torch.where(keep, b, torch.zeros((), dtype=b.dtype, device=u.device))
                if p_soft is not None:
                    p_soft = p_soft * keep.unsqueeze(-1)
            x0 = None if state is None else state.to(self.state_dtype)
            states, final = pd_scan(idx, dv, b, x0=x0, p_soft=p_soft)
            features = torch.cat([states.real, states.imag], dim=-1).reshape(batch, steps, -1)
            # A module call (not F.linear on the weight) so that wrappers such as PEFT LoRA apply here too.
            y = self.output_proj(features.to(self.output_proj.weight.dtype)) + self.skip * u
        return y.to(hidden_states.dtype), final

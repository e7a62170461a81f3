"""BD-LRU and H-LRU mixers (docs/design.md §5): linear recurrences with normalised selective gates.

Both split a recurrent state of width `lru_total_state_size` into N groups of m (m = `lru_group_size`: a block
of BD-LRU, the order of H-LRU) and compute, from the layer input u_t (B, T, d), gates g_t = W_g u_t + b_g
normalised over each row together with the input gate, so that a row's gate magnitudes sum to (at most) one.
The projections are `in_proj` (W_v), `gate_proj` (W_g, b_g) and `out_proj` (W_o).

BD-LRU, N dense m x m blocks:
  v_t = W_v u_t (N, m);  p = normalise(g_t) (N, m, m+1);  A_t = p[..., :m],  beta_t = p[..., m]
  h_t = A_t h_{t-1} + beta_t * v_t (block by block);     y_t = W_o vec(h_t)
H-LRU, order m over N channels:
  v_t = W_v u_t (N,);    p = normalise(g_t) (N, m+1);    a_{t,k} = p[:, k-1],  beta_t = p[:, m]
  h_t = sum_k a_{t,k} h_{t-k} + beta_t * v_t;            y_t = W_o [h_t; h_{t-1}; ...; h_{t-m+1}]
  scanned as S_t = C_t S_{t-1} + [beta_t v_t, 0, ...], S_t = [h_t ... h_{t-m+1}], C_t the companion matrix.
With m = 1 both are the diagonal selective LRU h_t = a_t h_{t-1} + (1 - a_t) v_t (softmax); the mixer name
`diag_lru` is BD-LRU with m = 1.

Stability: with every normalisation but `none`, |h_t[i]| <= sum_j |A_t[i, j]| |h_{t-1}[j]| + |beta_t[i]| |v_t[i]|
<= max(||h_{t-1}||_inf, |v_t[i]|), so the state never exceeds max |v| seen so far. `none` uses the raw gates
and is unbounded (the state can grow geometrically).

The cached state is S (B, N, m) in float32 (for H-LRU: the last m values of h per channel); the gates and the
scan always run in float32, while under bf16 autocast the projections run in bf16. Every parameter is an
nn.Linear, so the model's `_init_weights` gives the docs/design.md §5 init: weights N(0, config.initializer_range
= 0.02), zero gate bias.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PretrainedConfig

from hf_ssm.ops.dispatch import scan_ops

from .config_values import LRU_NORMALIZATIONS

# Floor of the L1 denominators of `tanh_l1` and `relu_l1`: when every gate of a row is (near) zero the row
# stays near zero instead of dividing 0 by 0. Flooring the denominator only shrinks the row, keeping sum |p| <= 1.
_L1_EPS = 1e-6


def normalize_gates(g: torch.Tensor, kind: str) -> torch.Tensor:
    """Normalise gate logits over the last axis so that each row's magnitudes sum to one (at most).

    softmax: softmax(g); sigmoid_l1: sigmoid(g) / sum sigmoid(g); tanh_l1: tanh(g) / sum |tanh(g)| (signed);
    relu_l1: relu(g) / sum relu(g) (an all-negative row gives zeros); none: g unchanged (unbounded).
    """
    if kind == "softmax":
        # The gate axis is short (m + 1: 2 for diag_lru) and last; CPU softmax down a short last axis runs one tiny row
        # at a time, and was 28 % of a diag_lru training step. Down the same axis moved first, it vectorises across
        # the rows: 10x faster forward, 4x forward + backward at (64, 256, 64, 1, 2), same values (torch 2.13, CPU).
        return torch.softmax(g.movedim(-1, 0), dim=0).movedim(0, -1)
    if kind == "sigmoid_l1":
        s = torch.sigmoid(g)
        return s / s.sum(dim=-1, keepdim=True)
    if kind == "tanh_l1":
        s = torch.tanh(g)
        return s / s.abs().sum(dim=-1, keepdim=True).clamp_min(_L1_EPS)
    if kind == "relu_l1":
        s = torch.relu(g)
        return s / s.sum(dim=-1, keepdim=True).clamp_min(_L1_EPS)
    if kind == "none":
        return g
    raise ValueError(f"`lru_normalization` must be one of {list(LRU_NORMALIZATIONS)}, got {kind!r}")


class _NormalizedLRUMixer(nn.Module):
    """What BD-LRU and H-LRU share: the state layout (B, N, m), the float32 scan, the output projection.

    forward(hidden_states (B, T, d), state (B, N, m) float32 or None, mask (B, T) bool or None)
        -> (output (B, T, d), final state (B, N, m) float32)
    The projections run in the weights' dtype (bf16 under autocast); the gates are normalised and scanned in
    float32. The scan is the op named by `scan_op` on the ScanOps bound to this input's device
    (hf_ssm.ops.dispatch): masked-out positions (padding) are the identity there, and T = 1 (decoding) is one
    O(N m^2) update.
    Subclasses define `gates` and `scan_inputs`.
    """

    state_dtype = torch.float32
    scan_op = "block_scan"

    def __init__(self, config: PretrainedConfig, layer_idx: int, group_size: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.group_size = group_size
        self.total_state_size = config.lru_total_state_size
        self.num_groups = config.lru_total_state_size // group_size
        self.normalization = config.lru_normalization
        self._config = config
        self.out_proj = nn.Linear(self.num_groups * group_size, config.hidden_size, bias=False)

    @property
    def scan_backend(self) -> str:
        """The config's `scan_backend`, read at every call: changing it on a built model re-binds the scans."""
        return getattr(self._config, "scan_backend", "auto")

    def initial_state(self, batch_size: int, device=None) -> torch.Tensor:
        return torch.zeros(batch_size, self.num_groups, self.group_size, dtype=self.state_dtype, device=device)

    def scan_inputs(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The float32 per-step inputs of the scan op for input u (B, T, d)."""
        raise NotImplementedError

    def states(
        self, u: torch.Tensor, state: torch.Tensor | None = None, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Recurrent states (B, T, N, m) and the final state (B, N, m), float32, for input u (B, T, d)."""
        scan = getattr(scan_ops(self.scan_backend, u.device), self.scan_op)
        x0 = None if state is None else state.to(self.state_dtype)
        return scan(*self.scan_inputs(u), x0, mask)

    def forward(self, hidden_states: torch.Tensor, state: torch.Tensor | None = None, mask: torch.Tensor | None = None):
        batch, steps, _ = hidden_states.shape
        # The projections run in the weights' dtype, or in bf16 under autocast; gates and scan in float32.
        states, final = self.states(hidden_states.to(self.out_proj.weight.dtype), state, mask)
        # float32 states into the projection's dtype (under autocast the matmul itself runs in bf16)
        y = self.out_proj(states.reshape(batch, steps, -1).to(self.out_proj.weight.dtype))
        return y.to(hidden_states.dtype), final


class BlockDiagonalLRUMixer(_NormalizedLRUMixer):
    """BD-LRU: N blocks of size m with dense, row-normalised m x m transitions (the input gate in each row)."""

    def __init__(self, config: PretrainedConfig, layer_idx: int, group_size: int | None = None):
        m = config.lru_group_size if group_size is None else group_size
        super().__init__(config, layer_idx, m)
        d, n = config.hidden_size, self.num_groups
        self.in_proj = nn.Linear(d, n * m, bias=False)
        self.gate_proj = nn.Linear(d, n * m * (m + 1))

    def gates(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalised gates p (B, T, N, m, m+1) and values v (B, T, N, m), float32, for input u (B, T, d)."""
        n, m = self.num_groups, self.group_size
        g = self.gate_proj(u).float().unflatten(-1, (n, m, m + 1))
        v = self.in_proj(u).float().unflatten(-1, (n, m))
        return normalize_gates(g, self.normalization), v

    def scan_inputs(self, u):
        """A (B, T, N, m, m) and b (B, T, N, m) of block_scan."""
        p, v = self.gates(u)
        m = self.group_size
        return p[..., :m], p[..., m] * v


class DiagonalLRUMixer(BlockDiagonalLRUMixer):
    """The diagonal selective LRU: BD-LRU with blocks of size 1 (state width `lru_total_state_size`), the baseline."""

    def __init__(self, config: PretrainedConfig, layer_idx: int):
        super().__init__(config, layer_idx, group_size=1)


class HigherOrderLRUMixer(_NormalizedLRUMixer):
    """H-LRU: N channels, each an order-m recurrence over its own last m values, per-channel normalised gates."""

    scan_op = "companion_scan"

    def __init__(self, config: PretrainedConfig, layer_idx: int):
        super().__init__(config, layer_idx, config.lru_group_size)
        d, n, m = config.hidden_size, self.num_groups, self.group_size
        self.in_proj = nn.Linear(d, n, bias=False)
        self.gate_proj = nn.Linear(d, n * (m + 1))

    def gates(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalised gates p (B, T, N, m+1) and values v (B, T, N), float32, for input u (B, T, d).

        p[..., k-1] is a_k, the weight of h_{t-k}; p[..., m] is the input gate beta.
        """
        n, m = self.num_groups, self.group_size
        g = self.gate_proj(u).float().unflatten(-1, (n, m + 1))
        return normalize_gates(g, self.normalization), self.in_proj(u).float()

    def scan_inputs(self, u):
        """Companion first rows a (B, T, N, m) and slot-0 inputs beta * v (B, T, N) of companion_scan: only h_t
        receives input, the older slots are shifted copies."""
        p, v = self.gates(u)
        m = self.group_size
        return p[..., :m], p[..., m] * v


__all__ = ["BlockDiagonalLRUMixer", "DiagonalLRUMixer", "HigherOrderLRUMixer", "normalize_gates"]

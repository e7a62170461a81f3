"""LrcSSM and the diagonal GRU / MGU / LSTM mixers (docs/design.md §6): non-linear cells whose Jacobian is diagonal.

Every state-dependent term is elementwise in the state x (a per-channel gain, never a matrix) while the input
terms stay dense in u, so dx_t/dx_{t-1} is diagonal and a whole sequence is solved by DEER (hf_ssm.ops.deer): Newton
iterations that are one diagonal linear scan each. Per layer, with u_t the layer input (B, T, d) and D =
`lrc_num_channels` channels:

  lrc_ssm   f = g_fx sigma(a_f x + c_f) + g_fu sigma(W_f u + e_f) + g_leak
            z = g_zx sigma(a_z x + c_z) + g_zu sigma(W_z u + e_z) + g_leak
            eps = k x + W_eps u + e_eps        (W_eps u only with `lrc_input_term`; the released code drops it)
            x_t = x + sigma(eps) (-sigma(f) x + e_leak tanh(z))          (Euler step, dt = 1; x = x_{t-1})
  gru_ssm   z = sigma(W_z u + v_z h), r = sigma(W_r u + v_r h), n = tanh(W_n u + r v_n h),  h_t = n + z (h - n)
  mgu_ssm   f = sigma(W_f u + v_f h), n = tanh(W_n u + v_n f h),                         h_t = h + f (n - h)
  lstm_ssm  i, f, o = sigma(W u + v h), g = tanh(W_g u + v_g h), c_t = f c + i g,       h_t = o tanh(c_t)

(every W u carries a bias). The output is W_o x_t (W_o h_t for the LSTM), back to width d.

The LSTM's state is (c, h): c_t depends on c (diag) and on h (through the gates), and h_t on both through c_t,
so its Jacobian is a 2 x 2 block per channel, not diagonal. **[choice]** It is solved as it is: DEER's linear
step becomes a block-diagonal scan over 2 x 2 blocks (the block-scan op), still exact and O(T D) work. A
reformulation with a diagonal Jacobian would have to change the cell (e.g. gates fed by c instead of h); this
keeps the standard LSTM with diagonal recurrent matrices. Its state tensor is planar, (B, 2, D) = stack(c, h)
along dim 1, so c and h are contiguous (B, D) planes (and the Jacobian (B, T, 2, 2, D) four contiguous planes).

The cells below give their Jacobians analytically (checked against forward-mode JVPs in the tests). Decoding
(T = 1) is the exact single step; the cell and the DEER solve run in float32, while under bf16 autocast the
projections in_proj / out_proj run in bf16.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn
from transformers import PretrainedConfig

from hf_ssm.ops.deer import DEEROptions, deer_solve, sequential_rollout


def _init_copy(param: nn.Parameter, value: torch.Tensor) -> None:
    """Set `param` to `value` unless transformers marked it as already initialised (loaded from a checkpoint)."""
    if not getattr(param, "_is_hf_initialized", False):
        with torch.no_grad():
            param.copy_(value)


# Each cell has two forms of the same F:
#   step               plain out-of-place torch, differentiable: the sequential loop, decoding, and the one VJP of
#                      DEER's implicit gradient;
#   step_and_jacobian  F and its Jacobian for DEER's Newton steps, never differentiated, so it reuses its
#                      intermediates in place: on CPU each fresh full-size tensor costs more in page faults than
#                      the arithmetic, and this runs once per Newton iteration.
# Shorthand below: s' = s (1 - s) is sigma' from s = sigma(y); t' = 1 - t^2 is tanh' from t = tanh(y).
# tanh is written as 2 sigma(2 y) - 1 in both forms (the same function, the same rounding in both): torch.tanh
# runs several times slower than torch.sigmoid on common CPU builds, and these cells are evaluated per iteration.


def _dsigmoid_(s: torch.Tensor) -> torch.Tensor:
    """s (1 - s), in place."""
    return s.addcmul_(s, s, value=-1)


def _tanh(y: torch.Tensor) -> torch.Tensor:
    return 2 * torch.sigmoid(2 * y) - 1


def _tanh_(y: torch.Tensor) -> torch.Tensor:
    """_tanh(y), in place."""
    return y.mul_(2).sigmoid_().mul_(2).sub_(1)


class LRCCell:
    """inputs: (f_in, z_in, eps_in) (B, [T,] D) = the input-only parts of f, z, eps.
    weights: (a_f, c_f, g_fx, a_z, c_z, g_zx, k, e_leak) each (D,)."""

    block = 1

    @staticmethod
    def step(x, inputs, weights):
        f_in, z_in, eps_in = inputs
        a_f, c_f, g_fx, a_z, c_z, g_zx, k, e_leak = weights
        f = g_fx * torch.sigmoid(a_f * x + c_f) + f_in
        z = g_zx * torch.sigmoid(a_z * x + c_z) + z_in
        eps = k * x + eps_in
        return x + torch.sigmoid(eps) * (e_leak * _tanh(z) - torch.sigmoid(f) * x)

    @staticmethod
    @torch.no_grad()
    def step_and_jacobian(x, inputs, weights):
        # J = 1 + k s_eps' drive + s_eps (e_leak t_z' g_zx a_z s_z' - s_f - s_f' g_fx a_f sf' x)
        f_in, z_in, eps_in = inputs
        a_f, c_f, g_fx, a_z, c_z, g_zx, k, e_leak = weights
        sf = torch.addcmul(c_f, a_f, x).sigmoid_()  # state part of f (before its gain)
        sz = torch.addcmul(c_z, a_z, x).sigmoid_()
        s_eps = torch.addcmul(eps_in, k, x).sigmoid_()
        s_f = torch.addcmul(f_in, g_fx, sf).sigmoid_()  # sigma(f)
        t_z = _tanh_(torch.addcmul(z_in, g_zx, sz))  # tanh(z)
        drive = torch.mul(t_z, e_leak).addcmul_(s_f, x, value=-1)
        x_new = torch.addcmul(x, s_eps, drive)
        # Every buffer below is reused once its value is no longer needed: d_drive lives in sz, jac in s_eps.
        d_drive = _dsigmoid_(sz).mul_(t_z.mul_(t_z).neg_().add_(1)).mul_(e_leak * g_zx * a_z).sub_(s_f)
        d_drive.addcmul_(_dsigmoid_(s_f), _dsigmoid_(sf).mul_(x).mul_(g_fx * a_f), value=-1).mul_(s_eps)
        jac = _dsigmoid_(s_eps).mul_(drive).mul_(k).add_(d_drive).add_(1)
        return x_new, jac


class GRUCell:
    """inputs: (zi, ri, ni) = W u + b per gate; weights: (v_z, v_r, v_n) each (D,)."""

    block = 1

    @staticmethod
    def step(h, inputs, weights):
        zi, ri, ni = inputs
        v_z, v_r, v_n = weights
        z = torch.sigmoid(zi + v_z * h)
        r = torch.sigmoid(ri + v_r * h)
        n = _tanh(ni + r * v_n * h)
        return n + z * (h - n)

    @staticmethod
    @torch.no_grad()
    def step_and_jacobian(h, inputs, weights):
        # J = z + z' v_z (h - n) + (1 - z) n' v_n (r' v_r h + r)
        zi, ri, ni = inputs
        v_z, v_r, v_n = weights
        z = torch.addcmul(zi, v_z, h).sigmoid_()
        r = torch.addcmul(ri, v_r, h).sigmoid_()
        n = _tanh_(torch.addcmul(ni, torch.mul(r, v_n), h))
        h_minus_n = torch.sub(h, n)
        h_new = torch.addcmul(n, z, h_minus_n)
        dn = torch.addcmul(r, _dsigmoid_(r.clone()).mul_(v_r), h).mul_(v_n).mul_(n.mul_(n).neg_().add_(1))
        jac = _dsigmoid_(z.clone()).mul_(v_z).mul_(h_minus_n).add_(z)
        jac.addcmul_(z.neg_().add_(1), dn)
        return h_new, jac


class MGUCell:
    """inputs: (fi, ni) = W u + b per gate; weights: (v_f, v_n) each (D,)."""

    block = 1

    @staticmethod
    def step(h, inputs, weights):
        fi, ni = inputs
        v_f, v_n = weights
        f = torch.sigmoid(fi + v_f * h)
        n = _tanh(ni + v_n * f * h)
        return h + f * (n - h)

    @staticmethod
    @torch.no_grad()
    def step_and_jacobian(h, inputs, weights):
        # J = 1 - f + f' v_f (n - h) + f n' v_n (f' v_f h + f)
        fi, ni = inputs
        v_f, v_n = weights
        f = torch.addcmul(fi, v_f, h).sigmoid_()
        n = _tanh_(torch.addcmul(ni, v_n, torch.mul(f, h)))
        n_minus_h = torch.sub(n, h)
        h_new = torch.addcmul(h, f, n_minus_h)
        df = _dsigmoid_(f.clone()).mul_(v_f)
        dn = torch.addcmul(f, df, h).mul_(v_n).mul_(n.mul_(n).neg_().add_(1)).mul_(f)
        jac = df.mul_(n_minus_h).sub_(f).add_(1).add_(dn)
        return h_new, jac


class LSTMCell:
    """State (..., 2, D) = (c, h), planar. inputs: (ii, fi, gi, oi) = W u + b per gate; weights: (v_i, v_f, v_g, v_o).

    Jacobian per channel, rows (c_t, h_t), columns (c, h):
        [[f,                   dc/dh                                ],
         [o tanh'(c_t) f,      o' v_o tanh(c_t) + o tanh'(c_t) dc/dh]]   with dc/dh = f' v_f c + i' v_i g + i g' v_g.
    """

    block = 2

    @staticmethod
    def step(x, inputs, weights):
        ii, fi, gi, oi = inputs
        v_i, v_f, v_g, v_o = weights
        c, h = x[..., 0, :], x[..., 1, :]
        c_new = torch.sigmoid(fi + v_f * h) * c + torch.sigmoid(ii + v_i * h) * _tanh(gi + v_g * h)
        return torch.stack([c_new, torch.sigmoid(oi + v_o * h) * _tanh(c_new)], dim=-2)

    @staticmethod
    @torch.no_grad()
    def step_and_jacobian(x, inputs, weights):
        ii, fi, gi, oi = inputs
        v_i, v_f, v_g, v_o = weights
        c, h = x[..., 0, :], x[..., 1, :]
        i = torch.addcmul(ii, v_i, h).sigmoid_()
        f = torch.addcmul(fi, v_f, h).sigmoid_()
        g = _tanh_(torch.addcmul(gi, v_g, h))
        o = torch.addcmul(oi, v_o, h).sigmoid_()
        c_new = torch.mul(i, g).addcmul_(f, c)
        t_c = _tanh_(c_new.clone())
        dc_dh = _dsigmoid_(f.clone()).mul_(v_f).mul_(c)
        dc_dh.addcmul_(_dsigmoid_(i.clone()).mul_(v_i), g).addcmul_(i, g.mul_(g).neg_().add_(1).mul_(v_g))
        o_dt = torch.mul(t_c, t_c).neg_().add_(1).mul_(o)  # o tanh'(c_t)
        j_hh = _dsigmoid_(o.clone()).mul_(v_o).mul_(t_c).addcmul_(o_dt, dc_dh)
        # planar (..., 2, 2, D): four contiguous planes, stacked without interleaving
        jac = torch.stack([f, dc_dh, o_dt.mul(f), j_hh], dim=-2).unflatten(-2, (2, 2))
        return torch.stack([c_new, o.mul_(t_c)], dim=-2), jac


class NonlinearCellMixer(nn.Module):
    """Shared frame of the four mixers, each a non-linear cell x_t = F(x_{t-1}, u_t) (unlike the linear LRU
    mixers): gates = in_proj(u) + bias; solve the cell over T; out_proj.

    forward(hidden_states (B, T, d), state (B, D) [(B, 2, D) for the LSTM] float32 or None, mask (B, T) bool or
    None) -> (output (B, T, d), final state). Masked-out steps (padding) are the identity: the state is kept.
    `last_solve_info` holds the last DEER solve's SolveInfo (iterations, residual, ...), None after a loop.
    """

    cell = None
    gate_names: tuple[str, ...] = ()
    state_dtype = torch.float32

    def __init__(self, config: PretrainedConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.num_channels = d_state = config.lrc_num_channels
        self.solver = config.lrc_solver
        self.options = DEEROptions(
            tol=config.deer_tol,
            max_iter=config.deer_max_iter,
            damping=config.deer_damping,
            max_growth=config.deer_max_growth,
        )
        self._config = config  # scan_backend is read from it at every call (the property below)
        self.in_proj = nn.Linear(config.hidden_size, self.projected_gates(config) * d_state, bias=False)
        self.gate_bias = nn.Parameter(torch.zeros(len(self.gate_names), d_state))
        self.out_proj = nn.Linear(d_state, config.hidden_size, bias=False)
        self.last_solve_info = None

    @property
    def scan_backend(self) -> str:
        """The config's `scan_backend`, read at every call: changing it on a built model re-binds the scans."""
        return getattr(self._config, "scan_backend", "auto")

    def projected_gates(self, config: PretrainedConfig) -> int:
        """How many gates read the input through in_proj (the rest are bias only)."""
        return len(self.gate_names)

    @property
    def state_shape(self) -> tuple[int, ...]:
        return (self.num_channels,) if self.cell.block == 1 else (self.cell.block, self.num_channels)

    def initial_state(self, batch_size: int, device=None) -> torch.Tensor:
        return torch.zeros(batch_size, *self.state_shape, dtype=self.state_dtype, device=device)

    def gates(self, u: torch.Tensor) -> list[torch.Tensor]:
        """Pre-activations W u + b of every gate, each (B, T, D) float32 (bias only past the projected ones)."""
        batch, steps, _ = u.shape
        proj = self.in_proj(u).float().view(batch, steps, -1, self.num_channels)
        bias = self.gate_bias.float()
        out = [proj[:, :, g] + bias[g] for g in range(proj.shape[2])]
        return out + [bias[g].expand(batch, steps, -1) for g in range(proj.shape[2], len(self.gate_names))]

    def cell_arguments(self, u: torch.Tensor):
        """(inputs, weights) of the cell for input u (B, T, d): per-step tensors and per-channel vectors."""
        raise NotImplementedError

    def readout(self, states: torch.Tensor) -> torch.Tensor:
        return states

    def reset_cell_parameters(self, init=nn.init) -> None:
        """Initialise this mixer's own parameters (`init`: torch.nn.init or transformers.initialization)."""
        raise NotImplementedError

    def forward(self, hidden_states: torch.Tensor, state: torch.Tensor | None = None, mask: torch.Tensor | None = None):
        batch, steps, _ = hidden_states.shape
        # The projections run in the weights' dtype, or in bf16 under autocast; the cell and its solver in float32.
        inputs, weights = self.cell_arguments(hidden_states.to(self.in_proj.weight.dtype))
        weights = tuple(w.float() for w in weights)
        if state is None:
            x0 = self.initial_state(batch, hidden_states.device)
        elif tuple(state.shape) != (batch, *self.state_shape):
            raise ValueError(
                f"`state` must have shape (B, *state) = {(batch, *self.state_shape)}, got {tuple(state.shape)}"
            )
        else:
            x0 = state.to(self.state_dtype)
        with torch.autocast(device_type=hidden_states.device.type, enabled=False):
            if steps == 1 or self.solver == "sequential":  # decoding: the exact single step, no iterations
                states = sequential_rollout(self.cell, inputs, weights, x0, mask)
                self.last_solve_info = None
            else:
                options = replace(self.options, scan_backend=self.scan_backend)
                states, self.last_solve_info = deer_solve(self.cell, inputs, weights, x0, mask, options)
        # A module call (not F.linear on the weight) so that wrappers such as PEFT LoRA apply here too.
        y = self.out_proj(self.readout(states).to(self.out_proj.weight.dtype))
        return y.to(hidden_states.dtype), states[:, -1].clone()


class LrcSSMMixer(NonlinearCellMixer):
    """LrcSSM (liquid-resistance liquid-capacitance) mixer, `lrc_ssm`."""

    cell = LRCCell()
    gate_names = ("f", "z", "eps")

    def __init__(self, config: PretrainedConfig, layer_idx: int):
        super().__init__(config, layer_idx)
        d_state = config.lrc_num_channels
        self.input_term = config.lrc_input_term
        self.state_gain = nn.Parameter(torch.empty(3, d_state))  # a_f, a_z, k
        self.state_bias = nn.Parameter(torch.empty(2, d_state))  # c_f, c_z
        self.state_scale = nn.Parameter(torch.empty(2, d_state))  # g_fx, g_zx
        self.input_scale = nn.Parameter(torch.empty(2, d_state))  # g_fu, g_zu
        self.leak_conductance = nn.Parameter(torch.empty(d_state))  # g_leak (shared by f and z)
        self.leak_potential = nn.Parameter(torch.empty(d_state))  # e_leak
        self.reset_cell_parameters()

    def projected_gates(self, config: PretrainedConfig) -> int:
        return 3 if config.lrc_input_term else 2  # without the input term, eps has only its bias e_eps

    def reset_cell_parameters(self, init=nn.init) -> None:
        init.uniform_(self.state_gain, -1.0, 1.0)
        init.zeros_(self.state_bias)
        init.ones_(self.state_scale)
        init.ones_(self.input_scale)
        init.zeros_(self.leak_conductance)
        init.ones_(self.leak_potential)
        # e_f = e_z = 0; e_eps spread over [-4, 0]: step sizes sigma(eps) from ~0.02 to 0.5, i.e. a range of time
        # scales from the start (a fixed 0 would make every channel forget at the same fast rate).
        bias = torch.zeros_like(self.gate_bias)
        bias[2].uniform_(-4.0, 0.0)
        _init_copy(self.gate_bias, bias)

    def cell_arguments(self, u):
        pre_f, pre_z, eps_in = self.gates(u)
        g_fu, g_zu = self.input_scale.float()
        leak = self.leak_conductance.float()
        f_in = g_fu * torch.sigmoid(pre_f) + leak
        z_in = g_zu * torch.sigmoid(pre_z) + leak
        a_f, a_z, k = self.state_gain
        c_f, c_z = self.state_bias
        g_fx, g_zx = self.state_scale
        return (f_in, z_in, eps_in), (a_f, c_f, g_fx, a_z, c_z, g_zx, k, self.leak_potential)


class _GatedMixer(NonlinearCellMixer):
    """GRU / MGU / LSTM with diagonal recurrent matrices: `recurrent` (G, D) holds v_gate per gate."""

    initial_bias: dict[str, float] = {}

    def __init__(self, config: PretrainedConfig, layer_idx: int):
        super().__init__(config, layer_idx)
        self.recurrent = nn.Parameter(torch.empty(len(self.gate_names), config.lrc_num_channels))
        self.reset_cell_parameters()

    def reset_cell_parameters(self, init=nn.init) -> None:
        init.uniform_(self.recurrent, -1.0, 1.0)
        values = torch.tensor([self.initial_bias.get(g, 0.0) for g in self.gate_names])
        _init_copy(self.gate_bias, values.to(self.gate_bias).unsqueeze(-1).expand_as(self.gate_bias))

    def cell_arguments(self, u):
        return tuple(self.gates(u)), tuple(self.recurrent.unbind(0))


class GruSSMMixer(_GatedMixer):
    """Diagonal-recurrence GRU, `gru_ssm`. Update-gate bias +1: the state is mostly kept at the start."""

    cell = GRUCell()
    gate_names = ("z", "r", "n")
    initial_bias = {"z": 1.0}


class MguSSMMixer(_GatedMixer):
    """Diagonal-recurrence minimal gated unit, `mgu_ssm`. Forget-gate bias -1: small updates at the start."""

    cell = MGUCell()
    gate_names = ("f", "n")
    initial_bias = {"f": -1.0}


class LstmSSMMixer(_GatedMixer):
    """Diagonal-recurrence LSTM, `lstm_ssm`; state (B, 2, D) = (c, h), output read from h. Forget bias +1."""

    cell = LSTMCell()
    gate_names = ("i", "f", "g", "o")
    initial_bias = {"f": 1.0}

    def readout(self, states):
        return states[..., 1, :]


LRC_MIXER_CLASSES: dict[str, type[NonlinearCellMixer]] = {
    "lrc_ssm": LrcSSMMixer,
    "gru_ssm": GruSSMMixer,
    "mgu_ssm": MguSSMMixer,
    "lstm_ssm": LstmSSMMixer,
}

__all__ = [
    "LRC_MIXER_CLASSES",
    "GRUCell",
    "GruSSMMixer",
    "LRCCell",
    "LSTMCell",
    "LrcSSMMixer",
    "LstmSSMMixer",
    "MGUCell",
    "MguSSMMixer",
    "NonlinearCellMixer",
]

"""PD-SSM mixer (docs/design.md §4): transition A_t = P_t D_t, P column-one-hot, D complex diagonal.

Per head (H heads, state N each), with u_t the layer input (B, T, d):
  P_t   made by the layer's transition mode (config.pd_ssm_transition; pd_transitions.py: the dictionary of the
          paper, a bank of K matrices, or N x N logits straight from u_t), straight-through in the backward
  |D_t| = sigmoid(MLP_mag(u_t)), arg D_t = 2 pi sigmoid(MLP_phase(u_t))
          (config.pd_ssm_diagonal: "complex" as here; "magnitude": arg D_t = 0; "unit": D_t = 1)
  x_t   = P_t D_t x_{t-1} + B u_t,   y_t = Re(C x_t) + D_skip * u_t
          (config.pd_ssm_output_skip False: y_t = Re(C x_t), no D_skip)
          (config.pd_ssm_input: "projection" as here; "none": no B, x_t = P_t D_t x_{t-1})

The mixer computes D and b, its transition mode makes P_t's inputs and calls its op (hf_ssm.ops.dispatch.ScanOps: torch
or Triton, bound once per device and backend), and the mixer projects (`in_proj` is B, `out_proj` C); Re(C x) is a real
linear map of [Re x, Im x]. Under autocast the projections run in the autocast dtype; the scan, its inputs from the
selection on and the state stay float32 / complex64.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from transformers import PretrainedConfig

from hf_ssm.ops.pd import as_complex
from hf_ssm.ops.pd import as_pairs as real_pairs  # `as_pairs` is also the flag of diagonal() / step_inputs()

from .pd_transitions import transition_mode

BASIS_STARTS = ("one_hot", "head_basis")  # pd_ssm_initial_state values whose x_0 is a basis vector in every head


def _is_plain_linear(module: nn.Module) -> bool:
    """An nn.Linear itself (not a subclass or a wrapper such as PEFT LoRA's), without hooks or a replaced forward: its
    product may be taken on its weight directly (stacked, reordered) with the same result as calling it."""
    return (
        type(module) is nn.Linear
        and not (module._forward_hooks or module._forward_pre_hooks)
        and "forward" not in module.__dict__  # a forward replaced on the instance (e.g. Accelerate's offload hooks)
    )


def _diagonal_from_gates(magnitude: torch.Tensor, phase: torch.Tensor, as_pairs: bool = False) -> torch.Tensor:
    """D = |D| exp(i arg D) with |D| = magnitude and arg D = 2 pi phase, both gates in (0, 1): complex64, or with
    `as_pairs` its (re, im) pairs (..., 2) float32 (what a compiled decode step computes with)."""
    angle = (2 * math.pi) * phase
    if as_pairs:
        return torch.stack((magnitude * torch.cos(angle), magnitude * torch.sin(angle)), dim=-1)
    return torch.polar(magnitude, angle)


_SQRT_HALF = math.sqrt(0.5)


def _exact_gelu(x: torch.Tensor) -> torch.Tensor:
    """GELU(x) = x/2 (1 + erf(x / sqrt 2)), as nn.functional.gelu, for the few elements of a decode step: on CPU,
    F.gelu hands a contiguous float tensor to oneDNN, whose fixed cost is several times that of these four ops."""
    xf = x.float()  # like F.gelu, in float32 also for a bfloat16 input
    half = xf * 0.5
    return torch.addcmul(half, half, torch.erf(xf * _SQRT_HALF)).to(x.dtype)


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
        return self.down(nn.functional.gelu(self.up(u)))

    def down(self, h: torch.Tensor) -> torch.Tensor:
        """The per-head output map on the activated hidden layer h (B, T, H*W) -> (B, T, H, out)."""
        if self.heads == 1:  # the per-head map is one linear map (one fused call, cheaper than the einsum)
            return nn.functional.linear(h, self.down_weight[0], self.down_bias[0]).unsqueeze(-2)
        h = h.unflatten(-1, (self.heads, self.width))
        return torch.einsum("bthw,how->btho", h, self.down_weight) + self.down_bias


class PDSSMMixer(nn.Module):
    """PD-SSM sequence mixer.

    forward(hidden_states (B, T, d), state (B, H, N) complex64 or None, mask (B, T) bool or None)
        -> (output (B, T, d), final state (B, H, N) complex64)
    Masked-out positions (padding) get the identity transition and zero input, so they never change the state.
    state None starts from `initial_state` (config.pd_ssm_initial_state: zeros, e_0 per head, e_(h mod N) in head h,
    or a learned x_0).
    `transition` is the layer's transition mode (pd_transitions.py); its parameters are registered on the mixer
    (`selection` and `dictionary` (H, K, N, N), or `transition_proj` and `transition_norm`).
    """

    state_dtype = torch.complex64

    def __init__(self, config: PretrainedConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        d = config.hidden_size
        self.num_heads = h = config.pd_ssm_num_heads
        self.head_state_size = n = config.pd_ssm_head_state_size
        self.dict_size = config.pd_ssm_dict_size
        self.temperature = config.pd_ssm_temperature
        self.transition = transition_mode(config)
        self._config = config  # scan_backend is read from it at every call (the property below)
        self._decode_weights_cache = None  # (key of the parameters, stacked weights) of the fused decode step
        self.initial_state_kind = config.pd_ssm_initial_state
        if self.initial_state_kind == "learned":
            # x_0 as [real, imag] pairs (H, N, 2); starts at e_0 (also when HybridSSMPreTrainedModel re-initialises it)
            self.learned_initial_state = nn.Parameter(self.one_hot_initial_state())
        self.transition.add_parameters(self, config)
        # Bias inits set where D starts: sigmoid(magnitude bias) = |D|, 2 pi sigmoid(phase bias) = arg D.
        # A variant without a learnt phase (or magnitude) has no MLP for it at all.
        self.diagonal_kind = config.pd_ssm_diagonal
        width = config.pd_ssm_mlp_width
        self.mlp_hidden_size = h * width  # of each MLP's hidden layer, all heads
        if self.diagonal_kind in ("complex", "magnitude"):
            self.magnitude = HeadwiseMLP(d, h, width, n, config.pd_ssm_magnitude_bias_init)
        if self.diagonal_kind == "complex":
            self.phase = HeadwiseMLP(d, h, width, n, config.pd_ssm_phase_bias_init)
        # pd_ssm_input="none": no B at all, the state is x_0 moved by the transitions alone
        self.input_kind = config.pd_ssm_input
        if self.input_kind == "projection":
            self.in_proj = nn.Linear(d, 2 * h * n, bias=False)  # complex B: real and imaginary parts
        self.out_proj = nn.Linear(2 * h * n, d, bias=False)  # Re(C x) = [C_re, -C_im] [Re x; Im x]
        self.output_init = config.pd_ssm_output_init
        # C's start: the generic N(0, initializer_range^2) (the model's _init_weights) or the identity, times this
        self.output_init_scale, self.output_init_std = config.pd_ssm_output_init_scale, config.initializer_range
        if self.output_init == "identity":
            with torch.no_grad():
                self.out_proj.weight.copy_(self.identity_output_weight())
        if not config.pd_ssm_output_trainable:
            self.out_proj.weight.requires_grad_(False)  # C stays at its initial value
        self.skip = nn.Parameter(torch.ones(d)) if config.pd_ssm_output_skip else None
        self.transition.finish_init(self)

    def learning_rate_scales(self) -> dict[str, float]:
        """{parameter name: learning rate as a multiple of the model's} of the parameters the config trains at their
        own rate (pd_ssm_transition_lr_scale: W_P); read by hf_ssm.parameter_groups."""
        return self.transition.learning_rate_scales(self)

    def init_parameters(self, init) -> None:
        """(Re)draws the start values with `init`'s functions (transformers.initialization, which skip loaded
        weights; the model's _init_weights calls this through the registry): the transition mode's parameters, the
        learned x_0 at e_0, D_skip = 1, the identity C of pd_ssm_output_init="identity" (the values __init__ gives
        them) and a normal C at pd_ssm_output_init_scale times the generic std: at 1.0 the generic init's draw
        stands (a default model draws every weight as before the field existed); another scale draws C again, so
        the weights initialised after it come from a later point of the random stream."""
        self.transition.init_parameters(self, init)
        if self.initial_state_kind == "learned":
            init.copy_(self.learned_initial_state, self.one_hot_initial_state(self.out_proj.weight.device))
        if self.skip is not None:
            init.ones_(self.skip)
        if self.output_init == "identity":
            init.copy_(self.out_proj.weight, self.identity_output_weight())
        elif self.output_init_scale != 1.0:
            init.normal_(self.out_proj.weight, mean=0.0, std=self.output_init_scale * self.output_init_std)

    def identity_output_weight(self) -> torch.Tensor:
        """C = pd_ssm_output_init_scale times the (d, 2HN) identity (pd_ssm_output_init="identity"), in out_proj's
        dtype and device."""
        weight = self.out_proj.weight
        return self.output_init_scale * torch.eye(*weight.shape, dtype=weight.dtype, device=weight.device)

    def one_hot_initial_state(self, device=None) -> torch.Tensor:
        """e_0 in every head as [real, imag] pairs: (H, N, 2) float32."""
        return self._basis_initial_state(torch.zeros(self.num_heads, dtype=torch.long), device)

    def head_basis_initial_state(self, device=None) -> torch.Tensor:
        """e_(h mod N) in head h as [real, imag] pairs: (H, N, 2) float32."""
        return self._basis_initial_state(torch.arange(self.num_heads) % self.head_state_size, device)

    def _basis_initial_state(self, rows: torch.Tensor, device=None) -> torch.Tensor:
        """e_(rows[h]) in head h as [real, imag] pairs: (H, N, 2) float32."""
        x0 = torch.zeros(self.num_heads, self.head_state_size, 2, device=device)
        x0[torch.arange(self.num_heads), rows, 0] = 1
        return x0

    def initial_state(self, batch_size: int, device=None) -> torch.Tensor:
        """x_0: (B, H, N) complex64; zeros, e_0 in every head, e_(h mod N) in head h, or the learned x_0
        (differentiable)."""
        shape = (batch_size, self.num_heads, self.head_state_size)
        if self.initial_state_kind == "zeros":
            return torch.zeros(shape, dtype=self.state_dtype, device=device)
        if self.initial_state_kind == "learned":
            pairs = self.learned_initial_state
        elif self.initial_state_kind == "head_basis":
            pairs = self.head_basis_initial_state()
        else:
            pairs = self.one_hot_initial_state()
        return torch.view_as_complex(pairs.float().to(device).contiguous()).expand(shape)

    def transition_logits(self, u: torch.Tensor) -> torch.Tensor:
        """The transition mode's logits of u (B, T, d), float32: the selection logits W_s u_t (B, T, H, K) of the
        dictionary and bank modes, the column logits of P_t (B, T, H, N, N) of the direct mode."""
        return self.transition.logits(self, u)

    def is_pure_automaton(self) -> bool:
        """D = 1, no input map and a basis-vector start (e_0 or e_(h mod N); a zero start without input is refused by
        the config): every state is then a basis vector (docs/design.md §8.3), which the direct transition's training
        path uses (hf_ssm/ops/pd/automaton.py)."""
        return self.diagonal_kind == "unit" and self.input_kind == "none" and self.initial_state_kind in BASIS_STARTS

    def diagonal(self, u: torch.Tensor, as_pairs: bool = False) -> torch.Tensor:
        """D_t: (B, T, H, N) complex64, |D| = sigmoid(MLP_mag(u)), arg D = 2 pi sigmoid(MLP_phase(u)); with
        `as_pairs` its (B, T, H, N, 2) float32 (re, im) pairs (a compiled decode step computes in pairs)."""
        batch, steps, _ = u.shape
        shape = (batch, steps, self.num_heads, self.head_state_size)
        if self.diagonal_kind == "unit":
            if as_pairs:
                return torch.stack((torch.ones(shape, device=u.device), torch.zeros(shape, device=u.device)), -1)
            return torch.ones(shape, dtype=self.state_dtype, device=u.device)
        if self.diagonal_kind == "magnitude":
            magnitude = torch.sigmoid(self.magnitude(u).float())
            if as_pairs:
                return torch.stack((magnitude, torch.zeros_like(magnitude)), dim=-1)
            return torch.complex(magnitude, torch.zeros_like(magnitude))
        return self._complex_diagonal(self.magnitude(u), self.phase(u), as_pairs)

    @staticmethod
    def _complex_diagonal(mag_out: torch.Tensor, phase_out: torch.Tensor, as_pairs: bool = False) -> torch.Tensor:
        """D = sigmoid(mag_out) exp(2 pi i sigmoid(phase_out)), from the two MLPs' outputs (B, T, H, N) (pairs:
        see `_diagonal_from_gates`)."""
        return _diagonal_from_gates(torch.sigmoid(mag_out.float()), torch.sigmoid(phase_out.float()), as_pairs)

    def step_inputs(self, u: torch.Tensor, as_pairs: bool = False) -> torch.Tensor:
        """b_t = B u_t, or zeros with pd_ssm_input="none": (B, T, H, N) complex64, or with `as_pairs` its
        (B, T, H, N, 2) float32 (re, im) pairs."""
        batch, steps, _ = u.shape
        shape = (batch, steps, self.num_heads, self.head_state_size)
        if self.input_kind == "none":
            if as_pairs:
                return torch.zeros(*shape, 2, device=u.device)
            return torch.zeros(shape, dtype=self.state_dtype, device=u.device)
        pairs = self.in_proj(u).float().view(*shape, 2)
        return pairs if as_pairs else torch.view_as_complex(pairs)

    @torch.no_grad()
    def transitions(self, u: torch.Tensor):
        """The transitions the layer applies to input u (B, T, d), for inspection: idx (B, T, H, N) int64 (row of
        the 1 in each column of P_t) and dv (B, T, H, N) complex64 (the diagonal of D_t)."""
        return self.transition.indices(self, u), self.diagonal(u)

    # ---- decode ------------------------------------------------------------------------------------------------
    #
    # At T = 1 on a CPU every small op costs a fixed dispatch and threading overhead many times its arithmetic. The
    # decode step of the default layer (complex D, input projection) therefore stacks the weights of the four maps of
    # u_t (B, selection, the two MLPs' first layers) into one product, the two per-head output layers into one
    # block-diagonal product (one head), and permutes C's columns so that it reads the state's (re, im) pairs as
    # stored. The stacked weights are cached while every weight keeps its storage and version.

    def _decode_maps(self) -> list[nn.Module] | None:
        """[in_proj, selection, magnitude.up, phase.up, out_proj] when the fused decode step applies: the default
        layer kind (a transition mode that allows it: pd_transitions.py), and every map a plain nn.Linear without hooks
        (a wrapper such as PEFT LoRA must still apply)."""
        if self.diagonal_kind != "complex" or self.input_kind != "projection" or not self.transition.fused_decode:
            return None
        # Read from _modules: attribute access to a submodule goes through nn.Module.__getattr__, and for these five
        # that alone costs several µs of a step of about 90.
        mods = self._modules
        mag, phase = mods["magnitude"]._modules, mods["phase"]._modules
        maps = [mods["in_proj"], mods["selection"], mag["up"], phase["up"], mods["out_proj"]]
        return maps if all(map(_is_plain_linear, maps)) else None

    def _decode_weights(self):
        """(in weight, in bias, down or None, out weight) of the fused decode step (see above), or None where it does
        not apply. down = (weight, bias) of blockdiag(W_mag, W_phase), one head only."""
        maps = self._decode_maps()
        if maps is None:
            return None
        # every parameter the stack is built from (the MLPs' own parameters are their per-head output layers); a new
        # parameter, new storage (also a dtype or device change) or an in-place update changes the key
        # Under torch.compile the stack is built inside the traced step (reading data pointers there is a graph
        # break); the compiled graph then does the stacking itself, no cache.
        compiling = torch.compiler.is_compiling()
        if not compiling:
            owners = (*maps, self._modules["magnitude"], self._modules["phase"])
            params = [p for owner in owners for p in owner._parameters.values() if p is not None]
            key = tuple([(id(p), p.data_ptr(), p._version) for p in params])
            cached = self._decode_weights_cache
            if cached is not None and cached[0] == key:
                return cached[1]
        with torch.no_grad():
            inputs = maps[:4]
            in_weight = torch.cat([m.weight for m in inputs])
            in_bias = torch.cat([m.weight.new_zeros(m.out_features) if m.bias is None else m.bias for m in inputs])
            if in_weight.shape[0] % 2:  # an even row count keeps every stride even: B u is then a complex view
                in_weight = torch.cat([in_weight, in_weight.new_zeros(1, in_weight.shape[1])])
                in_bias = torch.cat([in_bias, in_bias.new_zeros(1)])
            down = None
            if self.num_heads == 1:
                down = (
                    torch.block_diag(self.magnitude.down_weight[0], self.phase.down_weight[0]),
                    torch.cat([self.magnitude.down_bias[0], self.phase.down_bias[0]]),
                )
            out_weight = self._pair_order(self.out_proj.weight)
        weights = (in_weight, in_bias, down, out_weight)
        if not compiling:
            self._decode_weights_cache = (key, weights)
        return weights

    def _decode_forward(self, u: torch.Tensor, x0, mask, weights):
        """One step without gradient, u (B, 1, d): (output (B, 1, d), final state (B, H, N)), equal to the sequence
        path up to float rounding."""
        in_weight, in_bias, down, out_weight = weights
        batch = u.shape[0]
        h, n, k = self.num_heads, self.head_state_size, self.dict_size
        width = self.mlp_hidden_size
        # Compiled, the step computes in real (re, im) pairs (inductor generates no code for complex operators).
        compiling = torch.compiler.is_compiling()
        z = nn.functional.linear(u, in_weight, in_bias)  # [B u, W_s u, first MLP layers (, a zero pad)]
        b = z[..., : 2 * h * n].float().view(batch, 1, h, n, 2)
        b = b if compiling else torch.view_as_complex(b)
        logits = z[..., 2 * h * n : 2 * h * n + h * k].float().view(batch, 1, h, k)
        hidden = _exact_gelu(z[..., 2 * h * n + h * k : 2 * h * n + h * k + 2 * width])  # both MLPs' hidden layers
        if down is not None:  # one sigmoid call for |D| and arg D
            gates = torch.sigmoid(nn.functional.linear(hidden, *down).float()).view(batch, 1, 1, 2 * n)
            dv = _diagonal_from_gates(gates[..., :n], gates[..., n:], as_pairs=compiling)
        else:
            mag_out, phase_out = self.magnitude.down(hidden[..., :width]), self.phase.down(hidden[..., width:])
            dv = self._complex_diagonal(mag_out, phase_out, as_pairs=compiling)
        states, final = self.transition.run(self, logits, dv, b, x0, mask)
        pairs = real_pairs(states).reshape(batch, 1, 2 * h * n).to(out_weight.dtype)
        y = nn.functional.linear(pairs, out_weight)
        if self.skip is None:
            return y.to(u.dtype), final
        return torch.addcmul(y, self.skip, u).to(u.dtype), final

    @property
    def scan_backend(self) -> str:
        """The config's `scan_backend`, read at every call: changing it on a built model re-binds the scans."""
        return self._config.scan_backend

    def forward(self, hidden_states: torch.Tensor, state: torch.Tensor | None = None, mask: torch.Tensor | None = None):
        u = hidden_states
        x0, own_start = self._scan_start(u, state)
        weights = self._decode_weights() if u.shape[1] == 1 and not torch.is_grad_enabled() else None
        if weights is not None:
            return self._decode_forward(u, x0, mask, weights)
        features, final = self._scan_features(u, x0, mask, own_start)
        return self.read_out(features, u), final

    def read_out(self, features: torch.Tensor, hidden_states: torch.Tensor) -> torch.Tensor:
        """forward's output y = C features + skip u (B, T, d) from `state_features`' features (B, T, H, 2N) and
        the layer's input u (B, T, d)."""
        # A module call (not F.linear on the weight) so that wrappers such as PEFT LoRA apply here too.
        y = self.out_proj(features.flatten(2).to(self.out_proj.weight.dtype))
        if self.skip is not None:
            y = y + self.skip * hidden_states
        return y.to(hidden_states.dtype)

    def state_features(
        self, hidden_states: torch.Tensor, state: torch.Tensor | None = None, mask: torch.Tensor | None = None
    ):
        """(features (B, T, H, 2N) real, final state (B, H, N) complex64): every head's state after each step as
        [Re x (N), Im x (N)], the vector C reads (forward's y = C features + skip u). For readouts of their own
        per head (SSMAdapterConfig.classifier_per_head); `state` and `mask` as in forward."""
        x0, own_start = self._scan_start(hidden_states, state)
        return self._scan_features(hidden_states, x0, mask, own_start)

    def _scan_start(self, u: torch.Tensor, state: torch.Tensor | None):
        """(x_0 for the scan, None for zeros; whether it is the layer's own initial state, not a state passed in)."""
        own_start = state is None
        if state is None and self.initial_state_kind != "zeros":
            state = self.initial_state(u.shape[0], u.device)
        return (None if state is None else self._start_state(state)), own_start

    def _scan_features(self, u, x0, mask, own_start: bool):
        """The scan of forward and state_features: (features (B, T, H, 2N), final state)."""
        states, final = self.transition.scan(self, u, x0, mask, own_start)
        # per head [Re x, Im x]: the (re, im) pairs moved to the front of each head's state, one copy
        return real_pairs(states).transpose(-1, -2).reshape(*u.shape[:2], self.num_heads, -1), final

    def _start_state(self, state: torch.Tensor) -> torch.Tensor:
        """x_0 from a passed state: complex (B, H, N), or real (B, H, N, 2) pairs as the model's cache holds it
        (modeling_hybrid_ssm: a complex state is cached as pairs). Pairs stay pairs in a compiled step (the decode
        step then has no complex op), and become a complex64 view otherwise."""
        if torch.compiler.is_compiling() and not state.is_complex():
            return real_pairs(state)
        return as_complex(state)

    @staticmethod
    def decode_in_pairs(u: torch.Tensor) -> bool:
        """Whether this call is a compiled decode step (T = 1, no gradient, under torch.compile), which computes in
        real (re, im) pairs end to end: inductor generates no code for complex operators."""
        return u.shape[1] == 1 and torch.compiler.is_compiling() and not torch.is_grad_enabled()

    def _pair_order(self, weight: torch.Tensor) -> torch.Tensor:
        """C's weight (d, H * 2N), whose columns are per head [Re x (N), Im x (N)], with its columns reordered to per
        head N pairs (re, im): the layout of view_as_real(state), read as stored by the decode step."""
        return weight.unflatten(1, (self.num_heads, 2, self.head_state_size)).transpose(-1, -2).flatten(1)

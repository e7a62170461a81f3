"""PD-SSM's transition modes (docs/design.md §4): how a layer makes the column one-hot P_t of A_t = P_t D_t.

One class per mode (config.pd_ssm_transition), each owning its parameters, their start values, its logits from the
layer input u (B, T, d) and the op its scan calls (torch or Triton through hf_ssm.ops.dispatch.ScanOps):

- `DictionaryTransition` (the paper): s_t = softmax(W_s u_t), P_t = column argmax of M_t = sum_k s_t,k M_k;
  parameters `selection` (W_s) and `dictionary` (H, K, N, N); op hf_ssm.ops.pd.DICTIONARY_OP.
- `BankTransition` (after Flash PD-SSM): P_k = column argmax of score matrix k (once per call), P_t = P_{k_t} with
  k_t = argmax_k (W_s u_t)_k; the same two parameters (`dictionary` holds the score matrices), one choice for every
  head with pd_ssm_shared_selection; op hf_ssm.ops.pd.BANK_OP.
- `DirectTransition`: P_t = column argmax of the N x N logits W_P u_t of every head (W_P = `transition_proj`, from
  u_t's first pd_ssm_transition_input_size features, RMS-normed with pd_ssm_transition_norm); the PD scan of given
  transitions (ScanOps.pd_scan), or hf_ssm.ops.pd.automaton's for a pure automaton in training.

All are straight-through: softmax(. / tau) in place of each hardmax in the backward.

A mode object holds the config's numbers only; the mixer passes itself to every method, and the parameters are
registered on the mixer, so their state-dict names (`mixer.selection.weight`, `mixer.dictionary`,
`mixer.transition_proj.weight`, ...) are the layer's own whatever the mode.

`TRANSITIONS` is the one list of the modes: config.pd_ssm_transition's accepted values are its names, which the
config checks through `transition_class` (mixer_registry's pd_ssm checks, when a config with a pd_ssm layer is
validated), and the config checks of the fields that only some modes read ask the mode's class for its capability
flags (`has_dictionary`, `can_share_selection`, `has_projection`). Adding a mode is one class here and one
`register_transition(name, cls)` call, here for a built-in mode or at run time from any code; nothing else lists the
names. (A mode registered at run time is not written into a checkpoint's flat code: save_pretrained exports this
file as it is, so such a checkpoint loads only where the same registration runs first.)
"""

from __future__ import annotations

import math

import torch
from torch import nn

from hf_ssm.ops.dispatch import scan_ops
from hf_ssm.ops.pd import BANK_OP, DICTIONARY_OP, automaton_direct_scan, bank_indices, dictionary_indices, gather_bank

from .attention import HybridSSMRMSNorm


class TorchInit:
    """The two functions of transformers.initialization that the modes' `init_parameters` uses, as a layer's
    __init__ runs them: torch.nn.init.normal_ (looked up at each call, so that transformers' no-init context still
    skips it while weights are loaded) and an unguarded copy_."""

    @staticmethod
    def normal_(tensor: torch.Tensor, mean: float = 0.0, std: float = 1.0) -> torch.Tensor:
        return nn.init.normal_(tensor, mean=mean, std=std)

    @staticmethod
    def copy_(tensor: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return tensor.copy_(other)


class PDTransition:
    """How a PD-SSM layer makes P_t. `name` is its config.pd_ssm_transition value; `fused_decode`: the mixer's fused
    decode step (mixer_pd_ssm.py) can run it.

    The capability flags, read by the config's checks of the fields that only some modes use (class attributes, so
    that the checks need no mode object):
        has_dictionary: a dictionary (or bank) of K matrices per head and a selection W_s (`selection`,
            `dictionary`): pd_ssm_identity_entry_logit may be set.
        can_share_selection: the selection may be one choice for every head (pd_ssm_shared_selection).
        has_projection: P_t's logits are W_P u_t (`transition_proj`): pd_ssm_transition_input_size and
            pd_ssm_transition_lr_scale (W_P's learning rate, `learning_rate_scales`) may be set.
    """

    fused_decode = False
    has_dictionary = False
    can_share_selection = False
    has_projection = False

    def __init__(self, name: str, config):
        self.name = name

    def learning_rate_scales(self, mixer: nn.Module) -> dict[str, float]:
        """{parameter name in `mixer`: its learning rate as a multiple of the model's} for the parameters whose
        learning rate the config scales (none here; hf_ssm.parameter_groups reads it)."""
        return {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def add_parameters(self, mixer: nn.Module, config) -> None:
        """Registers the mode's parameters on `mixer` (during its __init__)."""
        raise NotImplementedError

    def init_parameters(self, mixer: nn.Module, init) -> None:
        """(Re)draws the start values of the mode's parameters with `init`'s functions (transformers.initialization,
        whose functions skip loaded weights, from the model's _init_weights; `TorchInit` from __init__)."""
        raise NotImplementedError

    def finish_init(self, mixer: nn.Module) -> None:
        """The end of the mixer's __init__: the start values the mode draws after the layer's other parameters."""

    def logits(self, mixer: nn.Module, u: torch.Tensor) -> torch.Tensor:
        """The mode's logits of the input u (B, T, d), float32 (the projection itself runs in the autocast dtype)."""
        raise NotImplementedError

    def scan(self, mixer: nn.Module, u, x0, mask, own_start: bool):
        """The layer's scan of u (B, T, d) from x0 (B, H, N) or None (zeros), mask (B, T) or None: (states (B, T, H,
        N), final state (B, H, N)). `own_start`: x0 is the layer's own initial state, not a passed-in state."""
        raise NotImplementedError

    def indices(self, mixer: nn.Module, u: torch.Tensor) -> torch.Tensor:
        """idx (B, T, H, N) int64 of the P_t the layer applies to u (B, T, d): the row of the 1 in each column."""
        raise NotImplementedError


class DictionaryTransition(PDTransition):
    """P_t = column argmax of sum_k softmax(W_s u_t)_k M_k (the paper). Parameters: `selection` (nn.Linear d -> H K,
    with a bias where pd_ssm_identity_entry_logit is set) and `dictionary` (H, K, N, N)."""

    op = DICTIONARY_OP
    fused_decode = True
    has_dictionary = True

    def __init__(self, name: str, config):
        super().__init__(name, config)
        self.shared_selection = config.pd_ssm_shared_selection
        self.identity_entry_logit = config.pd_ssm_identity_entry_logit
        self.dictionary_diagonal_init = float(config.pd_ssm_dictionary_diagonal_init)

    def add_parameters(self, mixer, config) -> None:
        h, k, n = mixer.num_heads, mixer.dict_size, mixer.head_state_size
        choices = k if self.shared_selection else h * k
        mixer.selection = nn.Linear(config.hidden_size, choices, bias=self.identity_entry_logit is not None)
        mixer.dictionary = nn.Parameter(torch.empty(h, k, n, n))  # drawn by finish_init

    def finish_init(self, mixer) -> None:
        # drawn after the layer's other parameters (the order of the random draws: a seed builds the same layer)
        self.init_parameters(mixer, TorchInit)

    def init_parameters(self, mixer, init) -> None:
        """The dictionary N(0, 1/N) plus pd_ssm_dictionary_diagonal_init on every diagonal, entry 0 the identity
        where pd_ssm_identity_entry_logit is set (and the selection bias its logit)."""
        dictionary, n = mixer.dictionary, mixer.head_state_size
        eye = torch.eye(n, device=dictionary.device, dtype=dictionary.dtype)
        start = init.normal_(torch.empty_like(dictionary), mean=0.0, std=n**-0.5)
        init.copy_(dictionary, self.identity_entry_start(start + self.dictionary_diagonal_init * eye))
        if mixer.selection.bias is not None:
            init.copy_(mixer.selection.bias, self.identity_entry_bias(mixer))

    def identity_entry_start(self, dictionary: torch.Tensor) -> torch.Tensor:
        """`dictionary` (H, K, N, N) with entry 0 of every head replaced by the identity scores when
        pd_ssm_identity_entry_logit is set (else unchanged)."""
        if self.identity_entry_logit is None:
            return dictionary
        out = dictionary.clone()
        out[:, 0] = torch.eye(out.shape[-1], dtype=out.dtype, device=out.device)
        return out

    def identity_entry_bias(self, mixer) -> torch.Tensor:
        """The selection bias's start (H * K,) or (K,) when shared: pd_ssm_identity_entry_logit for entry 0 of every
        head, 0 elsewhere."""
        heads = 1 if self.shared_selection else mixer.num_heads
        weight = mixer.selection.weight
        bias = torch.zeros(heads, mixer.dict_size, device=weight.device)
        bias[:, 0] = self.identity_entry_logit
        return bias.flatten().to(weight.dtype)

    def logits(self, mixer, u: torch.Tensor) -> torch.Tensor:
        """W_s u_t: (B, T, H, K) float32; with a shared selection the same K logits for every head."""
        batch, steps, _ = u.shape
        if self.shared_selection:
            shared = mixer.selection(u).float().view(batch, steps, 1, mixer.dict_size)
            return shared.expand(-1, -1, mixer.num_heads, -1).contiguous()
        return mixer.selection(u).float().view(batch, steps, mixer.num_heads, mixer.dict_size)

    def select(self, logits: torch.Tensor) -> torch.Tensor:
        """The op's selection input from the logits: the weights s_t = softmax over the dictionary."""
        return torch.softmax(logits, dim=-1)

    def run(self, mixer, logits, dv, b, x0, mask):
        """The op on the logits (B, T, H, K), D and b (B, T, H, N) (complex or pairs): (states, final state)."""
        ops = scan_ops(mixer.scan_backend, logits.device)
        return ops.pd_generated(self.op, self.select(logits), mixer.dictionary, dv, b, x0, mask, mixer.temperature)

    def scan(self, mixer, u, x0, mask, own_start: bool):
        logits = self.logits(mixer, u)
        # a compiled decode step computes in (re, im) pairs (hf_ssm.ops.pd.pd_step), so it gets D and b as pairs too
        pairs = mixer.decode_in_pairs(u)
        b = mixer.step_inputs(u, as_pairs=pairs)
        return self.run(mixer, logits, mixer.diagonal(u, as_pairs=pairs), b, x0, mask)

    def indices(self, mixer, u):
        return dictionary_indices(self.select(self.logits(mixer, u)), mixer.dictionary.float())


class BankTransition(DictionaryTransition):
    """P_t = P_{k_t}, the column argmax of score matrix k_t = argmax_k (W_s u_t)_k (after Flash PD-SSM). The
    parameters of the dictionary mode, `dictionary` holding the score matrices; pd_ssm_shared_selection: one choice
    (K logits) for every head."""

    op = BANK_OP
    can_share_selection = True

    @property
    def fused_decode(self) -> bool:
        return not self.shared_selection  # the fused step reads H * K selection logits

    def select(self, logits: torch.Tensor) -> torch.Tensor:
        """The op takes the logits themselves (their argmax picks the bank entry)."""
        return logits

    def indices(self, mixer, u):
        return gather_bank(bank_indices(mixer.dictionary.float()), self.logits(mixer, u).argmax(dim=-1))


class DirectTransition(PDTransition):
    """P_t = column argmax of W_P u_t (N x N logits per head, no dictionary and no selection). Parameters:
    `transition_proj` (nn.Linear k_in -> H N^2, no bias; k_in = pd_ssm_transition_input_size or d) and, with
    pd_ssm_transition_norm, `transition_norm` (RMSNorm(k_in) with its own gain; else the attribute is None)."""

    has_projection = True

    def __init__(self, name: str, config):
        super().__init__(name, config)
        self.input_size = config.pd_ssm_transition_input_size or config.hidden_size
        # W_P N(0, s^2 / k_in): N(0, s^2) logits for a unit-RMS input
        self.init_std = config.pd_ssm_transition_init_scale / math.sqrt(self.input_size)
        self.norm = config.pd_ssm_transition_norm
        # None: 1 / sqrt(k_in), the step of a free logit table (docs/design.md §8.8); configs written before the
        # field (an adapter's, a checkpoint's) train W_P at the model's rate
        scale = getattr(config, "pd_ssm_transition_lr_scale", 1.0)
        self.lr_scale = self.input_size**-0.5 if scale is None else float(scale)

    def learning_rate_scales(self, mixer) -> dict[str, float]:
        return {"transition_proj.weight": self.lr_scale} if self.lr_scale != 1 else {}

    def add_parameters(self, mixer, config) -> None:
        n = mixer.head_state_size
        mixer.transition_proj = nn.Linear(self.input_size, mixer.num_heads * n * n, bias=False)
        self.init_parameters(mixer, TorchInit)  # drawn at once (the order of the random draws, see finish_init)
        # pd_ssm_transition_norm: W_P reads RMSNorm(u_t), unit-RMS whatever the scale of u
        mixer.transition_norm = HybridSSMRMSNorm(self.input_size, eps=config.rms_norm_eps) if self.norm else None

    def init_parameters(self, mixer, init) -> None:
        init.normal_(mixer.transition_proj.weight, mean=0.0, std=self.init_std)

    def logits(self, mixer, u: torch.Tensor) -> torch.Tensor:
        """The column logits of P_t, (B, T, H, N, N) float32, [..., i, j] = row i of column j, from u (B, T, d)'s
        first `input_size` features."""
        batch, steps, _ = u.shape
        n = mixer.head_state_size
        u = u[..., : self.input_size]
        if mixer.transition_norm is not None:
            u = mixer.transition_norm(u)
        return mixer.transition_proj(u).float().view(batch, steps, mixer.num_heads, n, n)

    def indices(self, mixer, u):
        return self.logits(mixer, u).max(dim=-2).indices

    def scan(self, mixer, u, x0, mask, own_start: bool):
        """P_t = column argmax of the logits (straight-through, the column softmax at the temperature in the
        backward), then the PD scan. A padded step is the identity, passes no gradient to its logits, and has D = 1,
        b = 0. With the layer's own start (`own_start`) a pure automaton's states are basis vectors, and training
        takes hf_ssm.ops.pd.automaton_direct_scan's O(N) gradient."""
        logits = self.logits(mixer, u)
        # max(...).indices: the same first-of-tied index as argmax, ~5x faster down a short non-last axis on CPU
        idx = logits.max(dim=-2).indices
        if mask is not None:  # a padded step is the identity permutation, on either path
            idx = torch.where(mask.bool()[..., None, None], idx, torch.arange(idx.shape[-1], device=idx.device))
        if own_start and mixer.is_pure_automaton() and torch.is_grad_enabled() and logits.requires_grad:
            return automaton_direct_scan(logits, idx, x0, mask, mixer.temperature)
        # a compiled decode step computes in (re, im) pairs (hf_ssm.ops.pd.pd_step), so it gets D and b as pairs too
        pairs = mixer.decode_in_pairs(u)
        dv, b = mixer.diagonal(u, as_pairs=pairs), mixer.step_inputs(u, as_pairs=pairs)
        if mask is not None:
            keep = mask.bool()[..., None, None, None] if pairs else mask.bool()[..., None, None]
            one = (
                torch.tensor([1.0, 0.0], device=dv.device)
                if pairs
                else torch.ones((), dtype=dv.dtype, device=dv.device)
            )
            dv = torch.where(keep, dv, one)
            b = torch.where(keep, b, torch.zeros((), dtype=b.dtype, device=b.device))
        p_soft = None
        if torch.is_grad_enabled() and logits.requires_grad:
            p_soft = torch.softmax(logits / mixer.temperature, dim=-2)
            if mask is not None:
                p_soft = p_soft * mask.to(p_soft.dtype)[..., None, None, None]
        if x0 is None:
            x0 = torch.zeros_like(b[:, 0])
        return scan_ops(mixer.scan_backend, u.device).pd_scan(idx, dv, b, x0, p_soft)


# The capability flags of a mode class (PDTransition's docstring), as transition_names takes them.
CAPABILITIES = ("has_dictionary", "can_share_selection", "has_projection")
# config.pd_ssm_transition -> its mode class, in registration order: the one list of the accepted names.
TRANSITIONS: dict[str, type[PDTransition]] = {}


def register_transition(name: str, cls: type[PDTransition]) -> type[PDTransition]:
    """Make `cls` (a PDTransition subclass) the mode of config.pd_ssm_transition == `name`; returns `cls`.

    The config accepts `name` from then on (its check reads TRANSITIONS), and a PD-SSM layer of that config holds
    a `cls(name, config)`. ValueError for a name that is not a non-empty string or is already taken, TypeError for
    a class that is not a PDTransition subclass."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a transition mode's name must be a non-empty string, got {name!r}")
    if name in TRANSITIONS:
        raise ValueError(f"transition mode {name!r} is already registered (registered: {list(TRANSITIONS)})")
    if not (isinstance(cls, type) and issubclass(cls, PDTransition)):
        raise TypeError(f"transition mode {name!r}: the class must be a subclass of PDTransition, got {cls!r}")
    TRANSITIONS[name] = cls
    return cls


def unregister_transition(name: str) -> None:
    """Remove mode `name` (one registered at run time, e.g. by a test); ValueError naming the registered ones."""
    transition_class(name)
    del TRANSITIONS[name]


def transition_class(name) -> type[PDTransition]:
    """The mode class of pd_ssm_transition `name`: the one check of the field's value (the config's, through
    mixer_registry). ValueError naming the field and the accepted values for any other value."""
    if not isinstance(name, str) or name not in TRANSITIONS:
        raise ValueError(f"`pd_ssm_transition` must be one of {list(TRANSITIONS)}, got {name!r}")
    return TRANSITIONS[name]


def transition_names(capability: str | None = None) -> tuple[str, ...]:
    """The registered mode names, in registration order; with `capability` (one of CAPABILITIES) only those of the
    modes that have it, as the config's errors name them."""
    if capability is not None and capability not in CAPABILITIES:
        raise ValueError(f"`capability` must be one of {list(CAPABILITIES)}, got {capability!r}")
    return tuple(name for name, cls in TRANSITIONS.items() if capability is None or getattr(cls, capability))


def transition_mode(config) -> PDTransition:
    """The mode object of config.pd_ssm_transition (a config saved before the field existed loads with its default,
    "dictionary", HybridSSMConfig's dataclass default)."""
    name = config.pd_ssm_transition
    return transition_class(name)(name, config)


register_transition("dictionary", DictionaryTransition)
register_transition("bank", BankTransition)
register_transition("direct", DirectTransition)


__all__ = [
    "CAPABILITIES",
    "TRANSITIONS",
    "BankTransition",
    "DictionaryTransition",
    "DirectTransition",
    "PDTransition",
    "TorchInit",
    "register_transition",
    "transition_class",
    "transition_mode",
    "transition_names",
    "unregister_transition",
]

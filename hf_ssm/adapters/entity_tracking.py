"""The entity-tracking adapter (docs/design.md §10.1, docs/adapter.md): who holds which object in BIG-Bench Hard's
tracking_shuffled_objects stories, as a PD-SSM permutation state over person slots.

A story introduces n people with one object each ("Alice gets Ulysses, Bob gets Frankenstein, ..."), swaps pairs
("Then, Bob and Alice swap books."), asks what one person holds ("At the end of the semester, Bob has") and lists the
objects as options "(A) ..", in any order. The adapter reads, per token t, the frozen base's hidden state h_t after
decoder layer k and the base's own input embedding of the token, ê_t (centred on the vocabulary's mean, unit norm):

- a **tagger** (a small MLP on RMSNorm(h_t), z-scored first with `standardize_input`) gives every token one role of
  hf_ssm.data.shuffled_objects.ROLES: part of a person's name, part of an object in a holding clause, a swap
  sentence's full stop, an option's letter, part of an option's text, or none (its arg-max: a hard choice). With
  `story_ends_at_options` the story ends at the first option letter: a token tagged name or object after it is read
  as option text (a stray tag there would otherwise start new pending names, or clear the asked one);
- a **binding memory**. A name is a run of name tokens, read as the bag (sum) of their ê. An object run that follows
  a new name opens the next slot i: person slot i gets that name's bag, object slot i the object's tokens (person i
  holds object i at the start). A later name is matched to the filled person slots by the cosine of the bags times
  a learnt scale, softmax over the slots and a "no slot" entry at cosine NO_MATCH;
- the **permutation state**, one PD-SSM head per object slot whose N = `slots` states are the person slots
  (column-one-hot P, D = 1, started at the identity: head k is at e_k). The names read since the last full stop of
  a swap (or the last object) are pending; at a swap's full stop the two slots with the most pending mass give the
  transposition P_t, applied to every head (hf_ssm.ops.pd.pd_scan, the package's PD scan);
- the **readout**: after the last swap the pending names are the asked one, r (B, S): o = Xᵀ r is the object slot
  the asked person holds (bilinear in the state X and the question's features), and option ℓ scores
  log Σ_k M[ℓ, k] o[k], M[ℓ, .] the softmax over object slots of the cosine between option ℓ's bag of tokens and
  each slot's (times a learnt scale).

Which name is a holder, a swap's or the asked one follows from where it stands (before an object, before a swap's
full stop, after the last one), not from the tagger, which only finds names. Names and objects are matched by the
base's own embeddings, so a name or an object never seen in training matches itself; what is learnt is where the
names, objects, full stops and options are (the tagger, from the base's features) and the two scales (through the
answer's loss; the hard roles pass it no gradient). Nothing is parsed from the text and the answer is never read:
the tagger's training labels are the roles the story generator records (NLStory.roles), used by the loss only. A
name outside the holdings, swaps and question (a sentence that changes nothing) would join the next swap's names.

forward(hidden_states (B, T, d), state=None, mask (B, T) or None, input_ids (B, T)) -> (output, final_state): the
options' scores (B, T, num_labels) for readout "classifier", W_out softmax(scores) (B, T, d) for "lm_head" (the
scores detached: the LM loss trains W_out alone). The full sequence from an empty state runs in parallel (the
memories' reads as causal sums over the T x T token similarities); a sequence that continues a state (decoding) runs
one token at a time (`_step`), with the same result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ..data.shuffled_objects import ROLE, ROLES
from ..modeling.attention import HybridSSMRMSNorm
from ..ops.pd import pd_scan
from .config import ENTITY_DEFAULTS, SSMAdapterConfig
from .layer import set_input_statistics

ABSENT = -30.0  # an option the story has not listed (below log(1e-6), the least a listed option scores)
NO_MATCH = 0.5  # the cosine at which a name's bag is as likely to be no introduced name as a slot
_EPS = 1e-6
_MASKED = -1e4  # a logit that softmax turns into 0 (finite, so a row with no allowed entry stays finite)


@dataclass
class EntityOutputs:
    """What the adapter computes for a chunk: option scores (B, T, C), the tagger's role logits (B, T, R), and the
    state after the chunk (`EntityTrackingAdapter.empty_state`'s layout)."""

    scores: torch.Tensor
    role_logits: torch.Tensor
    state: tuple


class Tagger(nn.Module):
    """Role logits (B, T, R) of features (B, T, d): Linear(d, w) -> GELU -> Linear(w, R), or Linear(d, R) at w = 0."""

    def __init__(self, hidden_size: int, width: int, roles: int):
        super().__init__()
        if width:
            self.net = nn.Sequential(nn.Linear(hidden_size, width), nn.GELU(), nn.Linear(width, roles))
        else:
            self.net = nn.Linear(hidden_size, roles)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features)


class OptionVote(nn.Module):
    """The readout: option scores (..., C) from the answer's object-slot distribution o (..., S), the cosine of every
    option's bag of tokens with every object slot's (..., C, S), the filled object slots (..., S) and the listed
    options (..., C) (both bool). score_ℓ = log(Σ_k softmax_k(scale · cos[ℓ, k]) o[k] + 1e-6); ABSENT for an option
    not listed yet. Its own module so that a forward hook sees the scores inside a whole model's forward."""

    def __init__(self, scale: float):
        super().__init__()
        self.log_scale = nn.Parameter(torch.tensor(math.log(scale)))

    def forward(self, answer, cosine, filled, listed) -> torch.Tensor:
        logits = (self.log_scale.exp() * cosine).masked_fill(~filled[..., None, :], _MASKED)
        match = logits.softmax(-1) * filled.any(-1)[..., None, None]
        chance = (match * answer[..., None, :]).sum(-1)
        return torch.log(chance + _EPS).masked_fill(~listed, ABSENT)


def _one_hot(index: torch.Tensor, size: int) -> torch.Tensor:
    """one_hot(index) (..., size) float of a float or integer index tensor; all zero where index is outside 0..size-1
    (no slot yet, or more than `size`)."""
    index = index.long()
    inside = (index >= 0) & (index < size)
    return nn.functional.one_hot(index.clamp(0, size - 1), size).float() * inside[..., None]


def _last_index(flags: torch.Tensor, inclusive: bool) -> torch.Tensor:
    """(B, T) long: the last position s <= t (s < t unless `inclusive`) where flags (B, T) is set, -1 where none."""
    positions = torch.arange(flags.shape[1], device=flags.device).expand_as(flags)
    last = torch.where(flags > 0, positions, -1).cummax(1).values
    if inclusive:
        return last
    return torch.cat([last.new_full((flags.shape[0], 1), -1), last[:, :-1]], 1)


def _at(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """values (B, T, ...) read at time index (B, T) (-1: zeros)."""
    picked = values.gather(1, index.clamp_min(0).view(*index.shape, *[1] * (values.dim() - 2)).expand_as(values))
    return picked * (index >= 0).view(*index.shape, *[1] * (values.dim() - 2))


class EntityTrackingAdapter(nn.Module):
    """The entity tracker (module docstring) with the SSMAdapter interface: forward(hidden_states, state, mask,
    input_ids) -> (output, final_state); `outputs` also returns the tagger's role logits.

    `embeddings`: the base's input embedding module (frozen), read at every forward and never saved with the
    adapter (it is the base's); its mean row is a buffer computed here (not saved: the same base gives it again).
    """

    def __init__(self, config: SSMAdapterConfig, hidden_size: int, embeddings: nn.Module):
        super().__init__()
        if config.kind != "entity_tracking":
            raise ValueError(f"EntityTrackingAdapter needs a config of kind 'entity_tracking', got {config.kind!r}")
        self.config = config
        settings = {**ENTITY_DEFAULTS, **config.entity_settings}
        self.slots, self.num_labels = settings["slots"], config.num_labels
        self.norm = HybridSSMRMSNorm(hidden_size, eps=config.norm_eps)
        self.tagger = Tagger(hidden_size, settings["tagger_width"], len(ROLES))
        self.log_name_scale = nn.Parameter(torch.tensor(math.log(settings["name_scale"])))
        self.vote = OptionVote(settings["object_scale"])
        if config.readout == "lm_head":
            # Zero init: a freshly attached adapter adds exactly 0, so the base's logits are bit-identical.
            self.out_proj = nn.Linear(config.num_labels, hidden_size, bias=False)
            nn.init.zeros_(self.out_proj.weight)
        if config.standardize_input:
            self.register_buffer("input_mean", torch.zeros(hidden_size))
            self.register_buffer("input_scale", torch.ones(hidden_size))
        self._embeddings = (embeddings,)  # a tuple: not a submodule, so the base's table is never saved here
        weight = embeddings.weight.detach().float()
        self.register_buffer("embedding_mean", weight.mean(0), persistent=False)
        self.story_ends_at_options = settings["story_ends_at_options"]
        self.set_trainable(True)

    # --- the SSMAdapter interface ----------------------------------------------------------------------------

    def set_trainable(self, trainable: bool = True) -> None:
        """requires_grad on every parameter of the adapter (it has no frozen part)."""
        for param in self.parameters():
            param.requires_grad_(trainable)

    @torch.no_grad()
    def set_input_statistics(self, features: torch.Tensor) -> None:
        """`input_mean` / `input_scale` from base features (n, d) (layer.set_input_statistics)."""
        set_input_statistics(self, features)

    def step_mask(self, mask: torch.Tensor | None, input_ids: torch.Tensor | None) -> torch.Tensor | None:
        """The tokens the adapter reads: every real one (`mask`; None = all)."""
        return mask

    def forward(self, hidden_states, state=None, mask=None, input_ids=None):
        out = self.outputs(hidden_states, state, mask, input_ids)
        if self.config.readout == "classifier":
            return out.scores, out.state
        # Detached: the LM head's loss trains W_out alone; the tracker learns from its own losses (docs/adapter.md).
        with torch.autocast(device_type=hidden_states.device.type, enabled=False):
            update = self.out_proj(out.scores.detach().softmax(-1))
        return update.to(hidden_states.dtype), out.state

    # --- the tracker ---------------------------------------------------------------------------------------

    def outputs(self, hidden_states, state=None, mask=None, input_ids=None) -> EntityOutputs:
        """Scores, role logits and final state of a chunk (class docstring). `state` None starts from the empty
        state (the parallel form); a state continues it one token at a time."""
        if input_ids is None:
            raise ValueError(
                "the entity-tracking adapter reads the base's embedding of every token: it needs input_ids"
            )
        if input_ids.shape != hidden_states.shape[:2]:
            raise ValueError(
                f"input_ids {tuple(input_ids.shape)} must match hidden_states {tuple(hidden_states.shape)}"
            )
        with torch.autocast(device_type=hidden_states.device.type, enabled=False):
            h = hidden_states.float()
            if self.config.standardize_input:
                h = (h - self.input_mean) / self.input_scale
            role_logits = self.tagger(self.norm(h)).float()
            # Hard roles, no gradient: the tagger learns from the roles' own loss only (a straight-through gradient of
            # the answer's loss kept it from learning them: docs/adapter.md); the answer's loss trains the scales.
            roles = nn.functional.one_hot(self.hard_roles(role_logits, state, mask), len(ROLES)).float()
            identity = self.identity(input_ids)
            if state is None:
                scores, final = self._parallel(roles, identity)
            else:
                steps = []
                for t in range(roles.shape[1]):
                    score, state = self._step(roles[:, t], identity[:, t], state)
                    steps.append(score)
                scores, final = torch.stack(steps, 1), state
        return EntityOutputs(scores, role_logits, final)

    @torch.no_grad()
    def hard_roles(self, role_logits: torch.Tensor, state: tuple | None = None, mask=None) -> torch.Tensor:
        """(B, T) long: the tagger's arg-max role of every token ("none" where `mask` (B, T) is 0: padding), a name
        or object after the first option letter (in this chunk, or before it: `state`'s options listed) read as
        option text with `story_ends_at_options`."""
        roles = role_logits.argmax(-1)
        if mask is not None:
            roles = roles * mask.to(roles.device, torch.bool)
        if not self.story_ends_at_options:
            return roles
        listed = (roles == ROLE["option"]).cumsum(1)
        if state is not None:
            listed = listed + state[5].to(listed.device, listed.dtype)[:, None]
        textual = (roles == ROLE["name"]) | (roles == ROLE["object"])
        return torch.where((listed > 0) & textual, ROLE["option_text"], roles)

    @torch.no_grad()
    def identity(self, input_ids: torch.Tensor) -> torch.Tensor:
        """ê (B, T, E): the base's input embedding of every token, centred on the vocabulary's mean, unit norm."""
        (embeddings,) = self._embeddings
        e = embeddings(input_ids.to(embeddings.weight.device)).float().to(self.embedding_mean.device)
        e = e - self.embedding_mean
        return e / e.norm(dim=-1, keepdim=True).clamp_min(_EPS)

    def empty_state(self, batch: int, device=None) -> tuple:
        """The state before any token, a tuple: holders (B,) (slots opened), person keys (B, S, E), object keys
        (B, S, E), pending names (B, S), the permutation X (B, S, S) with X[:, k] = head k's state (the identity),
        options listed (B,), option keys (B, C, E), the name being read (B, E), the last name read (B, E), and three
        flags (B,): a name was read since the last object, the last token was an object, the last token was a name."""
        s, c, e = self.slots, self.num_labels, self.embedding_mean.shape[0]
        zeros = torch.zeros
        eye = torch.eye(s, device=device).expand(batch, s, s).clone()
        return (zeros(batch, device=device), zeros(batch, s, e, device=device), zeros(batch, s, e, device=device),
                zeros(batch, s, device=device), eye, zeros(batch, device=device), zeros(batch, c, e, device=device),
                zeros(batch, e, device=device), zeros(batch, e, device=device), zeros(batch, device=device),
                zeros(batch, device=device), zeros(batch, device=device))  # fmt: skip

    def _match(self, bag: torch.Tensor, keys: torch.Tensor, filled: torch.Tensor) -> torch.Tensor:
        """(..., S): which person slot a name's bag (..., E) is, softmax over the filled slots (..., S) of
        scale * cos(bag, key) and a "no slot" entry at scale * NO_MATCH (dropped), so that a bag like none of the
        names (a mis-tagged word) adds little. keys (B, S, E); bag's leading axes start with B."""
        dots = torch.einsum("b...e,bse->b...s", bag, keys)
        key_norms = keys.norm(dim=-1).clamp_min(_EPS).view(keys.shape[0], *[1] * (bag.dim() - 2), keys.shape[1])
        scale = self.log_name_scale.exp()
        logits = (scale * dots / (bag.norm(dim=-1).clamp_min(_EPS)[..., None] * key_norms)).masked_fill(
            ~filled, _MASKED
        )
        logits = torch.cat([logits, (scale * NO_MATCH).expand(*logits.shape[:-1], 1)], -1)
        return logits.softmax(-1)[..., :-1] * filled.any(-1, keepdim=True)

    def _transpositions(self, pending: torch.Tensor, end: torch.Tensor):
        """(idx (..., S) long, soft P (..., S, S) or None): at a swap's full stop (`end` 1) the transposition of the
        two slots with the most pending name mass (both > 0.5, i.e. two names matched), else the identity; column j
        of P_t goes to row idx[j]. The soft P (where the pending mass has a gradient) is I + m mᵀ - 2 diag(m), m the
        pending mass at the full stop: the transposition itself when m = e_a + e_b; it carries the straight-through
        gradient of the hard P_t (hf_ssm.ops.pd.pd_scan's `p_soft`)."""
        top = pending.detach().topk(2, dim=-1)
        a, b = top.indices[..., 0:1], top.indices[..., 1:2]
        valid = ((end > 0.5) & (top.values[..., 1] > 0.5))[..., None]
        j = torch.arange(self.slots, device=pending.device).expand_as(pending)
        idx = torch.where(valid & (j == a), b, torch.where(valid & (j == b), a, j))
        soft = None
        if torch.is_grad_enabled() and pending.requires_grad:
            m = pending * end[..., None]
            eye = torch.eye(self.slots, device=pending.device)
            soft = eye + m[..., :, None] * m[..., None, :] - torch.diag_embed(2 * m)
        return idx, soft

    def _permutation(self, idx: torch.Tensor, soft, start: torch.Tensor | None):
        """(X (B, T, S, S), final X (B, S, S)) of the PD scan over transpositions idx (B, T, S) applied to every head
        (head k = object slot k, its state over person slots), from `start` (B, S, S) (None: the identity), D = 1."""
        batch, steps, s = idx.shape
        heads = idx[:, :, None, :].expand(batch, steps, s, s).contiguous()
        ones = torch.ones(heads.shape, dtype=torch.complex64, device=idx.device)
        x0 = torch.eye(s, device=idx.device).expand(batch, s, s) if start is None else start
        p_soft = None if soft is None else soft[:, :, None].expand(batch, steps, s, s, s)
        states, final = pd_scan(heads, ones, torch.zeros_like(ones), x0.to(torch.complex64), p_soft)
        return states.real, final.real

    def _option_cosine(self, sim, wo, wu, diagonal):
        """(B, T, C, S): at every t, the cosine between option ℓ's bag Σ wu[., ℓ] ê and object slot k's Σ wo[., k] ê
        over the tokens up to t, from the token similarities sim (B, T, T) (ê êᵀ)."""
        strict, upto = sim.tril(-1), sim.tril()
        toward_objects = upto @ wo  # Σ_{s<=t} sim[t, s] wo[s]
        toward_options = strict @ wu  # Σ_{s<t} sim[t, s] wu[s]
        gram = wu[..., :, None] * toward_objects[..., None, :] + toward_options[..., :, None] * wo[..., None, :]
        gram = gram.cumsum(1)  # the pairs whose later token is t, summed over t
        objects = (wo * (2 * (strict @ wo) + wo * diagonal[..., None])).cumsum(1)  # |slot bag|^2
        options = (wu * (2 * toward_options + wu * diagonal[..., None])).cumsum(1)  # |option bag|^2
        norms = options.clamp_min(_EPS).sqrt()[..., :, None] * objects.clamp_min(_EPS).sqrt()[..., None, :]
        return gram / norms

    @staticmethod
    def _names(named: torch.Tensor, identity: torch.Tensor):
        """A chunk's names as bags: (closed (B, T, E), the bag of the name whose last token is t - 1, zero unless t
        ends one; ends (B, T), 1 there; reading (B, E), the bag of a name still being read after the last token).
        named (B, T): 1 on the tokens of names; a name is a maximal run of them."""
        before = torch.cat([named.new_zeros(named.shape[0], 1), named[:, :-1]], 1)
        ends = before * (1 - named)
        begin = _last_index(named * (1 - before), inclusive=True)  # the first token of the current (or last) name
        total = (named[..., None] * identity).cumsum(1)
        bag = total - _at(total, begin - 1)
        closed = torch.cat([bag.new_zeros(bag.shape[0], 1, bag.shape[2]), bag[:, :-1]], 1) * ends[..., None]
        return closed, ends, bag[:, -1] * named[:, -1, None]

    def _parallel(self, roles: torch.Tensor, identity: torch.Tensor):
        """(scores (B, T, C), final state) of a whole chunk (roles (B, T, R) one-hot) from the empty state, every
        quantity at every t from the tokens up to t (module docstring; the object and option keys' reads as causal
        sums over the token similarities, a person key fixed once its slot opens)."""
        s, c = self.slots, self.num_labels
        named, obj, ends = roles[..., ROLE["name"]], roles[..., ROLE["object"]], roles[..., ROLE["swap_end"]]
        closed, name_ends, reading = self._names(named, identity)
        last_name = _last_index(name_ends, inclusive=True)
        # an object run opens slot i when a name was read since the previous object token; its key is that name
        opens = obj * (1 - torch.cat([obj.new_zeros(obj.shape[0], 1), obj[:, :-1]], 1))
        opens = opens * (last_name > _last_index(obj, inclusive=False))
        holders = opens.cumsum(1)
        slot = _one_hot(holders - 1, s)
        latest = _at(closed, last_name)  # (B, T, E): the last name read up to t
        people = torch.einsum("bts,bte->bse", slot * opens[..., None], latest)
        filled = torch.arange(s, device=roles.device) < holders[..., None]
        heard = (self._match(closed, people, filled) * name_ends[..., None]).cumsum(1)
        resets = ends + obj  # a swap's full stop and an object token start a new set of pending names
        pending = heard - _at(heard, _last_index(resets, inclusive=False))
        idx, soft = self._transpositions(pending, ends)
        perm, perm_final = self._permutation(idx, soft, None)  # perm[b, t, k, i]: person i holds object k
        answer = torch.einsum("btki,bti->btk", perm, pending)
        objects = slot * obj[..., None]
        listed = roles[..., ROLE["option"]].cumsum(1)
        option = _one_hot(listed - 1, c) * roles[..., ROLE["option_text"], None]
        sim = identity @ identity.transpose(1, 2)  # (B, T, T)
        cosine = self._option_cosine(sim, objects, option, sim.diagonal(dim1=1, dim2=2))
        shown = torch.arange(c, device=roles.device) < listed[..., None]
        scores = self.vote(answer, cosine, filled, shown)
        pending_final = heard[:, -1] - _at(heard, _last_index(resets, inclusive=True))[:, -1]
        fresh = (last_name[:, -1] > _last_index(obj, inclusive=True)[:, -1]).float()
        final = (
            holders[:, -1], people, torch.einsum("bts,bte->bse", objects, identity), pending_final, perm_final,
            listed[:, -1], torch.einsum("btc,bte->bce", option, identity), reading, latest[:, -1], fresh,
            obj[:, -1], named[:, -1],
        )  # fmt: skip
        return scores, final

    def _step(self, roles: torch.Tensor, identity: torch.Tensor, state: tuple):
        """(scores (B, C), next state) of one token (roles (B, R) one-hot, ê (B, E)) after `state`: the recurrent form
        of `_parallel` (a padding token, no role, leaves the state as it is, but ends a name being read, which the
        real token after it would have ended too)."""
        holders, people, objects, pending, perm, listed, options, reading, latest, fresh, was_obj, was_name = state
        s, c = self.slots, self.num_labels
        named, obj, ends = roles[:, ROLE["name"]], roles[:, ROLE["object"]], roles[:, ROLE["swap_end"]]
        name_end = was_name * (1 - named)
        latest = torch.where(name_end[:, None] > 0, reading, latest)
        fresh = torch.maximum(fresh, name_end)
        filled = torch.arange(s, device=roles.device) < holders[:, None]
        pending = pending + self._match(reading, people, filled) * name_end[:, None]
        reading = (reading * was_name[:, None] + identity) * named[:, None]
        opens = obj * (1 - was_obj) * fresh
        people = people + (_one_hot(holders, s) * opens[:, None])[..., None] * latest[:, None]
        holders = holders + opens
        fresh = fresh * (1 - obj)
        filled = torch.arange(s, device=roles.device) < holders[:, None]
        objects = objects + (_one_hot(holders - 1, s) * obj[:, None])[..., None] * identity[:, None]
        idx, soft = self._transpositions(pending[:, None], ends[:, None])
        _, perm = self._permutation(idx, soft, perm)
        answer = torch.einsum("bki,bi->bk", perm, pending)
        pending = pending * (1 - ends - obj)[:, None]
        listed = listed + roles[:, ROLE["option"]]
        options = (
            options + (_one_hot(listed - 1, c) * roles[:, ROLE["option_text"], None])[..., None] * identity[:, None]
        )
        gram = torch.einsum("bce,bse->bcs", options, objects)
        option_norms = (options * options).sum(-1).clamp_min(_EPS).sqrt()
        norms = option_norms[:, :, None] * (objects * objects).sum(-1).clamp_min(_EPS).sqrt()[:, None, :]
        shown = torch.arange(c, device=roles.device) < listed[:, None]
        scores = self.vote(answer, gram / norms, filled, shown)
        state = (holders, people, objects, pending, perm, listed, options, reading, latest, fresh, obj, named)
        return scores, state


__all__ = ["ABSENT", "EntityOutputs", "EntityTrackingAdapter", "OptionVote", "Tagger"]

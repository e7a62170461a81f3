"""Teacher forcing for a one-head pure-automaton PD-SSM layer (docs/design.md §8.7, "S5 with 32 generators").

A group word problem labels every prefix with its group element, and an automaton whose N states are the group's
elements (N = the number of classes, state k read as class k) has one right transition per (state, token): state
g on token v goes to g v. Trained end to end, the table entry taken at position t only gets a useful gradient once
the states before t are right, so the table is learnt one position at a time (docs/design.md §8.7). Teacher forcing
starts every position from the state that the previous label names: the B x T positions of a batch become B T
one-token sequences, each with its own start state e_(label t-1) (e_0, the identity, at t = 0) passed through the
model's inference cache, so each labelled position trains one table entry, P[v_t] e_(label t-1) -> e_(label t).
Validation and test always run the model on its own states.

This needs the readout fixed at "state k is class k": with a trained classifier the table could learn any
relabelling of the states, which the teacher-forced start states would then contradict. `fix_readout` sets the
classifier to the identity on the states' real parts and freezes it.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

# The layer a teacher-forced run needs (HybridSSMConfig values): one head, a pure automaton (D = 1, no input, start
# e_0, so every state is a basis vector), a direct transition, read out through C = I, alone in its block.
REQUIRED_CONFIG = {
    "mixers": ["pd_ssm"],
    "pd_ssm_num_heads": 1,
    "pd_ssm_transition": "direct",
    "pd_ssm_diagonal": "unit",
    "pd_ssm_input": "none",
    "pd_ssm_initial_state": "one_hot",
    "pd_ssm_output_init": "identity",
    "pd_ssm_output_trainable": False,
    "block_type": "mixer_only",
}


def check_teacher_forcing(config, task, supervision: str) -> None:
    """ValueError naming the first thing a teacher-forced run (`teacher_forcing_steps` > 0) lacks: the layer of
    REQUIRED_CONFIG, N = the task's number of classes, every prefix supervised, and a task whose empty word is class
    0 (the group word problems: class 0 is the identity)."""
    for name, value in REQUIRED_CONFIG.items():
        if getattr(config, name) != value:
            raise ValueError(
                f"`teacher_forcing_steps` needs {name}={value!r} (got {getattr(config, name)!r}): teacher forcing "
                "trains one pure-automaton PD-SSM head read out as 'state k is class k' (recipe `table_forced`)"
            )
    if config.pd_ssm_head_state_size != task.num_classes:
        raise ValueError(
            f"`teacher_forcing_steps` needs state_size = the task's number of classes, {task.num_classes} "
            f"(got {config.pd_ssm_head_state_size}): each state is named by its class"
        )
    if supervision != "every":
        raise ValueError(
            f"`teacher_forcing_steps` needs supervision='every' (got {supervision!r}): every label names a state"
        )
    if getattr(task, "identity_class", None) != 0:
        raise ValueError(
            f"`teacher_forcing_steps` needs a group word problem (a5, s5, s3, a4, ...), whose empty word is class 0; "
            f"got task {task.name!r}"
        )


def fix_readout(model) -> None:
    """Set the token classifier of `model` (a HybridSSMForTokenClassification of the required layer, d = 2 N) to
    class k = the real part of state k, bias 0, and freeze it. After the final RMSNorm a basis state e_k is
    sqrt(d) at hidden index k, so class k's logit is sqrt(d) (15.5 at N = 120) and every other class's 0."""
    classes = model.score.weight.shape[0]
    with torch.no_grad():
        model.score.weight.zero_()
        model.score.weight[:, :classes] = torch.eye(classes)
        model.score.bias.zero_()
    model.score.requires_grad_(False)


def teacher_forced_loss(model, config, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The token-classification loss of `model` (its HybridSSMConfig `config`; the model may be wrapped for
    distributed training) on (B, T) `input_ids` and `labels` (-100: not scored), every position run as a one-token
    sequence from the state its previous label names (e_0 at t = 0 and after an unscored position, whose loss is
    skipped in any case)."""
    batch, steps = input_ids.shape
    states = config.pd_ssm_head_state_size
    previous = torch.zeros_like(labels)
    previous[:, 1:] = labels[:, :-1].clamp(min=0)
    start = torch.zeros(batch * steps, 1, states, 2, device=input_ids.device)  # (B T, H = 1, N, (re, im))
    start[torch.arange(batch * steps, device=input_ids.device), 0, previous.flatten(), 0] = 1.0
    cache = DynamicCache(config=config)
    cache.update_recurrent_state(start, 0)
    out = model(input_ids=input_ids.reshape(-1, 1), cache=cache, labels=labels.reshape(-1, 1))
    return out.loss

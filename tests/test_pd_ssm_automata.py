"""Expressivity claim of docs/design.md §4 on the code: one PD-SSM layer with hand-set weights runs an automaton exactly."""

from __future__ import annotations

import pytest
import torch

from hf_ssm.modeling.mixer_pd_ssm import PDSSMMixer
from model_checks import tiny_config

START = 0  # token index of the start symbol (one-hot input channel 0)


def automaton_mixer(permutations: list[list[int]], transition: str = "dictionary") -> PDSSMMixer:
    """A one-head PD-SSM whose dictionary entry (bank mode: score matrix) k is the permutation matrix of symbol k,
    selected by a one-hot selection (logit 50 for the symbol's entry, 0 for the others).

    Input channel 0 is the start symbol (sets x = e_0 from x_0 = 0), channel k + 1 is symbol k. The output's
    first N channels read Re(x), so argmax of the output is the automaton state.
    """
    n, symbols = len(permutations[0]), len(permutations)
    d = max(8, symbols + 1, n)
    config = tiny_config(
        "P",
        hidden_size=d,
        pd_ssm_num_heads=1,
        pd_ssm_head_state_size=n,
        pd_ssm_dict_size=symbols,
        pd_ssm_transition=transition,
    )
    mixer = PDSSMMixer(config, layer_idx=0)
    with torch.no_grad():
        for p in mixer.parameters():
            p.zero_()
        for k in range(symbols):
            mixer.selection.weight[k, k + 1] = 50.0  # symbol k selects dictionary entry k
            for j, target in enumerate(permutations[k]):
                mixer.dictionary[0, k, target, j] = 1.0  # column j has its 1 in row target
        mixer.selection.weight[0, START] = 50.0  # the start symbol uses entry 0 (x_0 = 0, so any P works)
        mixer.magnitude.down_bias.fill_(30.0)  # |D| = sigmoid(30) = 1 in float32
        mixer.phase.down_bias.fill_(-30.0)  # arg D = 2 pi sigmoid(-30) ~ 6e-13
        mixer.in_proj.weight[0, START] = 1.0  # b = e_0 (real part of state 0) on the start symbol
        for i in range(n):
            mixer.out_proj.weight[i, i] = 1.0  # y[i] = Re x[i]
    return mixer


def run_automaton(permutations, symbols_seq):
    state, trace = 0, []
    for s in symbols_seq:
        state = permutations[s][state]
        trace.append(state)
    return trace


CYCLE5 = [[0, 1, 2, 3, 4], [1, 2, 3, 4, 0], [4, 0, 1, 2, 3]]  # stay, +1, -1 on a 5-cycle
PARITY = [[0, 1], [1, 0]]  # a keeps, b flips
S5 = [[1, 2, 3, 4, 0], [1, 0, 2, 3, 4]]  # a 5-cycle and a transposition generate S5 (non-abelian)


@pytest.mark.parametrize("transition", ["dictionary", "bank"])
@pytest.mark.parametrize("permutations", [CYCLE5, PARITY, S5], ids=["cycle5", "parity", "s5"])
def test_hand_set_pd_ssm_tracks_automaton_for_1000_steps(permutations, transition):
    """argmax of the layer output equals the true automaton state at every one of 1000 steps, with unit margin, in
    both transition modes."""
    mixer = automaton_mixer(permutations, transition)
    n, symbols = len(permutations[0]), len(permutations)
    seq = torch.randint(0, symbols, (1000,))
    u = torch.zeros(1, 1001, mixer.skip.shape[0])
    u[0, 0, START] = 1.0
    u[0, torch.arange(1, 1001), seq + 1] = 1.0
    with torch.no_grad():
        y, _ = mixer(u)
    expected = torch.tensor(run_automaton(permutations, seq.tolist()))
    readout = y[0, 1:, :n]
    assert torch.equal(readout.argmax(-1), expected)
    assert torch.allclose(readout, torch.nn.functional.one_hot(expected, n).float(), atol=1e-4)

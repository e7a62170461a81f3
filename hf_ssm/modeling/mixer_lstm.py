"""The true LSTM baseline mixer `lstm` (docs/design.md §6.8): one `torch.nn.LSTM` layer, run sequentially.

Unlike `lstm_ssm` (mixer_lrc.py: diagonal recurrent matrices, parallelised over time by DEER), this is the
standard LSTM with dense recurrent matrices W_hh, the cell PyTorch (cuDNN on a GPU) runs step by step:

  i, f, g, o = sigma, sigma, tanh, sigma of (W_ih u_t + b_ih + W_hh h_{t-1} + b_hh)
  c_t = f c_{t-1} + i g,   h_t = o tanh(c_t),   y_t = W_o h_t   (W_o = out_proj: H -> d, no bias)

with H = `lstm_hidden_size`. Its recurrent state is (h, c), cached as one float32 tensor (B, 2, H) = stack(h, c)
along dim 1, like the other SSM mixers keep theirs in their recurrent-state cache slot.

Padding (docs/design.md §7.4): a masked-out step leaves (h, c) unchanged and outputs W_o h of the last real step
before it (the kept state). For a mask with gaps (left padding, packed documents) every row's real tokens are
gathered to the front, run as one packed sequence (`pack_padded_sequence`) and the outputs scattered back; a
decode step (T = 1) is one LSTM step kept or dropped per row by `torch.where`, with no host read.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from transformers import PretrainedConfig


class LSTMMixer(nn.Module):
    """One sequential `nn.LSTM` layer (batch_first, hidden size H = config.lstm_hidden_size) and W_o: H -> d.

    forward(hidden_states (B, T, d), state (B, 2, H) = stack(h, c) or None, mask (B, T) bool or None)
        -> (output (B, T, d), final state (B, 2, H) float32)
    """

    state_dtype = torch.float32

    def __init__(self, config: PretrainedConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.hidden_size = config.lstm_hidden_size
        self.lstm = nn.LSTM(config.hidden_size, self.hidden_size, num_layers=1, batch_first=True)
        self.out_proj = nn.Linear(self.hidden_size, config.hidden_size, bias=False)

    def initial_state(self, batch_size: int, device=None) -> torch.Tensor:
        return torch.zeros(batch_size, 2, self.hidden_size, dtype=self.state_dtype, device=device)

    def forward(self, hidden_states: torch.Tensor, state: torch.Tensor | None = None, mask: torch.Tensor | None = None):
        batch, steps, _ = hidden_states.shape
        if state is None:
            state = self.initial_state(batch, hidden_states.device)
        elif tuple(state.shape) != (batch, 2, self.hidden_size):
            raise ValueError(
                f"`state` must have shape (B, 2, lstm_hidden_size) = {(batch, 2, self.hidden_size)}, got "
                f"{tuple(state.shape)}"
            )
        dtype = self.lstm.weight_ih_l0.dtype
        u = hidden_states.to(dtype)
        h0, c0 = (s.to(dtype).unsqueeze(0).contiguous() for s in state.unbind(1))  # nn.LSTM wants (1, B, H)
        if mask is None:
            out, (h, c) = self.lstm(u, (h0, c0))
        elif steps == 1:  # a decode step: keep the old state where the token is padding (no host read)
            out, (h, c) = self.lstm(u, (h0, c0))
            keep = mask.view(1, batch, 1)
            h, c = torch.where(keep, h, h0), torch.where(keep, c, c0)
            out = h.transpose(0, 1)
        else:
            out, (h, c) = self._masked(u, h0, c0, mask.bool())
        final = torch.stack([h[0], c[0]], dim=1).to(self.state_dtype)
        return self.out_proj(out.to(self.out_proj.weight.dtype)).to(hidden_states.dtype), final

    def _masked(self, u, h0, c0, mask):
        """The LSTM over the real tokens of every row only: (outputs (B, T, H), (h, c) each (1, B, H)).

        The real tokens of a row are gathered to its front (a stable sort keeps their order), run as a packed
        sequence, and position t outputs h after the row's k_t = (real tokens up to t)-th real token (h0 for k_t = 0).
        """
        batch, steps, _ = u.shape
        counts = mask.sum(1)
        order = torch.argsort((~mask).to(torch.int8), dim=1, stable=True)  # real positions first, in order
        front = u.gather(1, order.unsqueeze(-1).expand_as(u))
        # pack_padded_sequence needs lengths >= 1 (on the host): a row without a real token runs one step that is
        # discarded below.
        packed = pack_padded_sequence(front, counts.clamp_min(1).cpu(), batch_first=True, enforce_sorted=False)
        out, (h, c) = self.lstm(packed, (h0, c0))
        out, _ = pad_packed_sequence(out, batch_first=True)  # (B, max count, H)
        empty = (counts == 0).view(1, batch, 1)
        h, c = torch.where(empty, h0, h), torch.where(empty, c0, c)
        history = torch.cat([h0.transpose(0, 1), out], dim=1)  # index k: h after k real tokens
        seen = mask.long().cumsum(1)  # (B, T)
        out = history.gather(1, seen.unsqueeze(-1).expand(batch, steps, self.hidden_size))
        return out, (h, c)


__all__ = ["LSTMMixer"]

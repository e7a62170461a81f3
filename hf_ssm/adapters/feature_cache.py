"""Frozen-prefix feature cache: compute the base's hidden states below the adapter once per example, reuse them.

The adapter sits after decoder layer k of a frozen base. The embeddings and layers 0..k are frozen and see only
the input tokens, so their output h_k (B, T, d), the adapter's input, is a fixed function of the example (and so
is h_w of a later write layer w, kept beside it).
Training an adapter for several epochs (or several adapters at the same layer) needs h_k once per example:

    prefix = FrozenPrefix(adapted)
    h = prefix.features(input_ids=..., attention_mask=..., position_ids=...)   # runs layers 0..k only
    with prefix.replaced_by(h):                                               # layers 0..k are skipped,
        out = adapted(input_ids=..., attention_mask=..., position_ids=...)    # layer k returns h

`FeatureStore` keeps per-example features (L, d) in memory or in a memory-mapped file, in bfloat16 / float16 /
float32, up to a size limit. With a float32 store the loss and the adapter's gradients equal the full model's
to float rounding (tests/adapters/test_adapter.py); bfloat16 rounds h_k to 8 significant bits (relative error <= 2^-9),
float16 to 11 bits (and overflows beyond 65504), so training then sees slightly different features than
inference on the full model does.
"""

from __future__ import annotations

import os
import warnings
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from .model import SSMAdapterModel, find_decoder_layers, run_to_layer

STORE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# numpy has no bfloat16: a memory-mapped store keeps the raw bits in an integer type of the same width.
_BITS = {torch.float32: np.int32, torch.bfloat16: np.int16, torch.float16: np.int16}
_TORCH_BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


class FrozenPrefix:
    """The embeddings and decoder layers 0..k (k = the adapter's layer) of an `SSMAdapterModel`'s base.

    When the adapter writes after a later layer w (`write_layer_index`), layers k+1..w are frozen and never see
    the update either, so their output h_w is fixed too: the cached features are then h_k and h_w side by side,
    (B, T, 2d), and `replaced_by` puts each back in its place.

    Raises ValueError when any of them requires grad (e.g. a LoRA injected into them): their output would then
    not be fixed, and caching it would silently train something else.
    """

    def __init__(self, adapted: SSMAdapterModel):
        if not isinstance(adapted, SSMAdapterModel):
            raise ValueError(
                f"FrozenPrefix needs an SSMAdapterModel (attach_ssm_adapter), got {type(adapted).__name__}"
            )
        self.adapted = adapted
        _, self.layers, name = find_decoder_layers(adapted.base_model)
        self.k = adapted.adapter_layer_index
        self.w = adapted.adapter_write_layer_index
        modules = {f"{name}.{i}": self.layers[i] for i in range(self.w + 1)}
        modules["input embeddings"] = adapted.base_model.get_input_embeddings()
        trainable = [f"{m}: {n}" for m, mod in modules.items() for n, p in mod.named_parameters() if p.requires_grad]
        if trainable:
            raise ValueError(
                f"the frozen-prefix cache needs the embeddings and layers 0..{self.w} frozen, but these require grad: "
                f"{trainable[:5]}{' ...' if len(trainable) > 5 else ''}; turn the cache off for this method"
            )
        self.returns_tuple = False  # learnt by features(): transformers >= 5 decoder layers return a tensor

    def _unwrap(self, output) -> torch.Tensor:
        self.returns_tuple = not isinstance(output, torch.Tensor)
        return output[0] if self.returns_tuple else output

    @torch.no_grad()
    def features(self, adapter_input_only: bool = False, **inputs) -> torch.Tensor:
        """The cached features for these inputs: h_k (B, T, d), the output of decoder layer k, or with a later
        write layer h_k and h_w concatenated (B, T, 2d) unless `adapter_input_only`. Layers above the last one
        needed are not run. The adapter does not run for h_k alone; on the way to h_w its hook at layer k does
        (hooks cannot skip each other), and its update is dropped."""
        read_only = adapter_input_only or self.w == self.k
        captured = []

        def capture(module, args, output):
            captured.append(self._unwrap(output))

        handle = None if read_only else self.layers[self.k].register_forward_hook(capture, prepend=True)
        try:
            # prepend: stop before the adapter's own hook on this layer, so the adapter is not run either.
            target = self.layers[self.k if read_only else self.w]
            output = self._unwrap(run_to_layer(self.adapted.base_model, target, prepend=True, **inputs))
        finally:
            if handle is not None:
                handle.remove()
            self.adapted._context = None  # the decoder's post-hook did not run
            self.adapted._pending_update = None
        return output if read_only else torch.cat([captured[0], output], dim=-1)

    def adapter_input(self, features: torch.Tensor) -> torch.Tensor:
        """h_k (B, T, d) out of `features()`'s output."""
        return features if self.w == self.k else features.chunk(2, dim=-1)[0]

    @contextmanager
    def replaced_by(self, features: torch.Tensor):
        """Inside the block, layers 0..k-1 pass their input through and layer k returns h_k (with a later write
        layer w: layers k+1..w-1 pass through and layer w returns h_w), `features` as `features()` returns them;
        the layers' forward hooks (the adapter's) still run. For training forwards without a key/value cache
        only."""
        returned = {self.k: features} if self.w == self.k else dict(zip((self.k, self.w), features.chunk(2, dim=-1)))

        def wrap(hidden):
            return (hidden,) if self.returns_tuple else hidden

        def skip(hidden_states, *args, **kwargs):
            return wrap(hidden_states)

        def cached(value):
            def forward(hidden_states, *args, **kwargs):
                if kwargs.get("use_cache") or hidden_states.shape[:2] != value.shape[:2]:
                    raise ValueError(
                        "cached prefix features are for training forwards without a key/value cache on the batch "
                        f"they were computed for: features {tuple(value.shape[:2])}, hidden "
                        f"{tuple(hidden_states.shape[:2])}, use_cache={kwargs.get('use_cache')}"
                    )
                return wrap(value.to(hidden_states.dtype))

            return forward

        for i in range(self.w + 1):
            self.layers[i].forward = cached(returned[i]) if i in returned else skip
        try:
            yield
        finally:
            for i in range(self.w + 1):
                del self.layers[i].forward  # back to the class's forward


class FeatureStore:
    """Per-example prefix features (L, d) by example index, in memory (`path=None`) or in a memory-mapped file.

    Args:
        max_bytes: the size limit. An example that would pass it is not stored (`put` returns False; the first
            time, a warning says so and `skipped` counts them): its features are recomputed when it comes again.
        dtype: "bfloat16" (default: half the memory, see the module docstring for the rounding), "float16" or
            "float32".
        path: a file for the features (created, truncated); features are appended and read back memory-mapped.
    """

    def __init__(self, max_bytes: int, dtype: str = "bfloat16", path: str | os.PathLike | None = None):
        if dtype not in STORE_DTYPES:
            raise ValueError(f"`dtype` must be one of {list(STORE_DTYPES)}, got {dtype!r}")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"`max_bytes` must be an int >= 0, got {max_bytes!r}")
        self.dtype = STORE_DTYPES[dtype]
        self.max_bytes = max_bytes
        self.path = Path(path) if path is not None else None
        self.nbytes = 0
        self.skipped = 0
        self._memory: dict[int, torch.Tensor] = {}
        self._where: dict[int, tuple[int, tuple[int, ...]]] = {}  # file store: index -> (element offset, shape)
        self._map = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_bytes(b"")

    def __contains__(self, index: int) -> bool:
        return index in self._memory or index in self._where

    def __len__(self) -> int:
        return len(self._memory) + len(self._where)

    def put(self, index: int, features: torch.Tensor) -> bool:
        """Store `features` (L, d) of example `index` (rounded to the store's dtype); False when over the limit."""
        if index in self:
            return True
        value = features.detach().to("cpu", self.dtype).contiguous()
        size = value.numel() * value.element_size()
        if self.nbytes + size > self.max_bytes:
            if not self.skipped:
                warnings.warn(
                    f"feature cache full ({self.nbytes / 2**20:.0f} MiB of max {self.max_bytes / 2**20:.0f} MiB): "
                    "further examples are recomputed each time they come; raise the limit to cache them",
                    UserWarning,
                    stacklevel=2,
                )
            self.skipped += 1
            return False
        if self.path is None:
            self._memory[index] = value
        else:
            offset = self.nbytes // value.element_size()
            with open(self.path, "ab") as f:
                f.write(value.view(_TORCH_BITS[self.dtype]).numpy().tobytes())
            self._where[index] = (offset, tuple(value.shape))
            self._map = None  # re-map to see the appended bytes
        self.nbytes += size
        return True

    def get(self, index: int) -> torch.Tensor:
        """The stored features (L, d) of example `index`, in the store's dtype."""
        if self.path is None:
            return self._memory[index]
        offset, shape = self._where[index]
        if self._map is None:
            self._map = np.memmap(self.path, dtype=_BITS[self.dtype], mode="r")
        count = int(np.prod(shape))
        bits = torch.from_numpy(np.array(self._map[offset : offset + count])).view(self.dtype)
        return bits.reshape(shape)


def batch_features(prefix, store: FeatureStore, indices: list[int], batch: dict, device) -> torch.Tensor:
    """h_k (B, W, d) of a left-padded batch (`collate_nl_state_tracking`) of examples `indices`: from the store
    where every example is there, else computed for the batch and stored. Either way the features are rounded
    to the store's dtype, so a cache hit and a miss train on the same numbers. Padding positions hold zeros.
    `prefix`: a FrozenPrefix, or any module whose `features(input_ids, attention_mask, position_ids)` is fixed."""
    mask = batch["attention_mask"]
    lengths = mask.sum(-1).tolist()
    width = mask.shape[1]
    if not all(i in store for i in indices):
        inputs = {k: batch[k].to(device) for k in ("input_ids", "attention_mask", "position_ids")}
        computed = prefix.features(**inputs).to(store.dtype)
        for row, (index, n) in enumerate(zip(indices, lengths)):
            store.put(index, computed[row, width - n :])
        return computed.to(torch.float32).masked_fill(~mask.to(device, torch.bool).unsqueeze(-1), 0.0)
    rows = [store.get(i) for i in indices]
    out = torch.zeros(len(rows), width, rows[0].shape[-1], dtype=torch.float32, device=device)
    for row, (value, n) in enumerate(zip(rows, lengths)):
        out[row, width - n :] = value.to(device, torch.float32)
    return out


__all__ = ["STORE_DTYPES", "FeatureStore", "FrozenPrefix", "batch_features"]

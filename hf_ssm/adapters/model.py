"""Attach an SSM adapter to any Hugging Face causal LM that exposes its decoder layer list (docs/design.md §10).

`attach_ssm_adapter(model, config)` freezes the base, builds an `SSMAdapter` of the base's width and hooks it
after decoder layer `config.layer_index`; it returns an `SSMAdapterModel` that forwards, generates and
`save_pretrained`s like the base (the save writes only the adapter). No model-specific code: the decoder is
found as the one `nn.ModuleList` of `config.num_hidden_layers` blocks named `layers` / `h` / `blocks` / `layer`.

How the hooks see what they need (decoder layers get neither the 2D padding mask nor a "new sequence" flag):

- a forward pre-hook on the module owning the layer list (e.g. `Qwen2Model`) records, per call, the 2D
  `attention_mask` (B, past + T) and the `cache` passed in with its length `past` *before* any layer ran;
- a forward hook on the chosen layer runs the adapter on that layer's output with mask[:, -T:], so
  (left or right) padding never changes the adapter state;
- with `write_layer_index` later than the read layer, that hook keeps the update and a forward hook on the write
  layer adds it to its output (same call, same T).

Recurrent state (the robust part): the adapter's state lives in a `WeakKeyDictionary` keyed by the *cache
object* the layer received, with the number of tokens it has consumed. A call starts from a fresh zero state
when it has no cache, when its cache is new (`past == 0`, which covers every `generate()` call and every
forward that lets the model create its own cache) and continues the stored state otherwise. If the cache
length and the stored state disagree (a cropped or foreign cache) it raises instead of silently mixing
sequences. The cache's batch operations (`reorder_cache` for beam search, `batch_select_indices`,
`batch_repeat_interleave`) are wrapped on that cache instance so the state follows the key/value rows. States
die with their cache.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..modeling.legacy_names import rename_legacy_keys
from .config import ADAPTER_WEIGHTS_NAME, SSMAdapterConfig
from .layer import SSMAdapter

LAYER_LIST_NAMES = ("layers", "h", "blocks", "layer")
WEIGHTS_PREFIX = "ssm_adapter."
_ATTACHED_FLAG = "_hf_ssm_adapter_attached"


def text_config(model: nn.Module):
    config = model.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def find_decoder_layers(model: nn.Module) -> tuple[nn.Module, nn.ModuleList, str]:
    """(owner module, decoder layer list, its qualified name) of a causal LM, found by shape, not by model type."""
    num_layers = text_config(model).num_hidden_layers
    found: dict[int, tuple[nn.Module, nn.ModuleList, str]] = {}
    for owner_name, owner in model.named_modules():
        for child_name, child in owner.named_children():
            if child_name in LAYER_LIST_NAMES and isinstance(child, nn.ModuleList) and len(child) == num_layers:
                found.setdefault(id(child), (owner, child, f"{owner_name}.{child_name}".lstrip(".")))
    if len(found) != 1:
        names = [name for _, _, name in found.values()]
        raise ValueError(
            f"cannot locate the decoder layer list of {type(model).__name__}: expected exactly one nn.ModuleList of "
            f"config.num_hidden_layers = {num_layers} blocks named one of {list(LAYER_LIST_NAMES)}, found {names}"
        )
    return next(iter(found.values()))


class _StopForward(Exception):
    """Carries a decoder layer's output out of the model's forward (`run_to_layer`)."""

    def __init__(self, output):
        super().__init__("stopped after the requested decoder layer")
        self.output = output


def run_to_layer(model: nn.Module, layer: nn.Module, *, prepend: bool = False, **inputs):
    """The raw output of decoder layer `layer` (a tensor, or a tuple from older transformers) for
    `model(**inputs, use_cache=False)`; the layers above it are not run. Gradients flow unless the caller disables
    them. `prepend`: stop before the layer's other forward hooks (an SSM adapter's) run."""

    def stop(module, args, output):
        raise _StopForward(output)

    handle = layer.register_forward_hook(stop, prepend=prepend)
    try:
        model(**inputs, use_cache=False)
    except _StopForward as done:
        return done.output
    finally:
        handle.remove()
    raise RuntimeError(f"{type(model).__name__} never ran the requested decoder layer")


def _argument(signature: inspect.Signature | None, args: tuple, kwargs: dict, *names: str):
    """The value of the first of `names` passed to a call, by keyword or by position (None when absent)."""
    for name in names:
        if name in kwargs:
            return kwargs[name]
    if signature is not None and args:
        params = list(signature.parameters)
        for name in names:
            if name in params and params.index(name) < len(args):
                return args[params.index(name)]
    return None


def _signature(module: nn.Module) -> inspect.Signature | None:
    try:
        return inspect.signature(module.forward)
    except (TypeError, ValueError):
        return None


@dataclass
class _CallContext:
    """What the decoder's pre-hook saw for the current forward."""

    cache: Any
    past: int
    mask: torch.Tensor | None
    input_ids: torch.Tensor | None = None


@dataclass
class _StoredState:
    state: Any  # the mixer's recurrent state (a tensor, or a tuple of tensors)
    length: int  # tokens consumed, to check against the cache length on the next call


def _with_hidden(output, hidden: torch.Tensor):
    """A decoder layer's `output` (a tensor, or a tuple from older transformers) with its hidden states replaced."""
    return hidden if isinstance(output, torch.Tensor) else (hidden, *output[1:])


def _map_state(state, fn):
    if isinstance(state, torch.Tensor):
        return fn(state)
    return type(state)(_map_state(s, fn) for s in state)


class SSMAdapterModel(nn.Module):
    """A frozen base causal LM plus one SSM adapter. Attribute access falls through to the base model.

    forward(...) -> the base's output; with readout "classifier" it also carries `adapter_logits` (B, T, num_labels).
    generate(...) -> the base's generate; key/value cache and adapter state advance together.
    save_pretrained(dir) writes adapter_config.json + adapter_model.safetensors only.
    """

    def __init__(
        self,
        base_model: nn.Module,
        config: SSMAdapterConfig,
        adapter: SSMAdapter,
        layer_index: int,
        write_layer_index: int | None = None,
    ):
        super().__init__()
        self.base_model = base_model
        self.ssm_adapter = adapter
        self.adapter_config = config
        self.adapter_layer_index = layer_index
        self.adapter_write_layer_index = layer_index if write_layer_index is None else write_layer_index
        owner, layers, _ = find_decoder_layers(base_model)
        self._owner_signature = _signature(owner)
        self._layer_signature = _signature(layers[layer_index])
        self._context: _CallContext | None = None
        self._states: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._adapter_logits: torch.Tensor | None = None
        self._pending_update: torch.Tensor | None = None  # read layer -> write layer, within one forward
        self._hooks = [
            owner.register_forward_pre_hook(self._before_decoder, with_kwargs=True),
            owner.register_forward_hook(self._after_decoder),
            layers[layer_index].register_forward_hook(self._after_layer, with_kwargs=True),
        ]
        if self.writes_later:
            self._hooks.append(layers[self.adapter_write_layer_index].register_forward_hook(self._add_update))

    @property
    def writes_later(self) -> bool:
        """Whether the adapter's update is added after a later layer than the one it reads."""
        return self.adapter_write_layer_index != self.adapter_layer_index

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name in ("base_model", "ssm_adapter"):
                raise
            return getattr(self.base_model, name)

    # --- hooks -------------------------------------------------------------------------------------------

    def _before_decoder(self, module, args, kwargs):
        mask = _argument(self._owner_signature, args, kwargs, "attention_mask")
        cache = _argument(self._owner_signature, args, kwargs, "cache", "past_key_values")
        if mask is not None and not (isinstance(mask, torch.Tensor) and mask.dim() == 2):
            raise ValueError(
                "the SSM adapter needs `attention_mask` as a 2D (batch, seq) tensor to keep padding out of its state; "
                f"got {type(mask).__name__} {tuple(mask.shape) if isinstance(mask, torch.Tensor) else ''} "
                "(static / compiled caches that pre-build 4D masks are not supported)"
            )
        past = int(cache.get_seq_length()) if cache is not None and hasattr(cache, "get_seq_length") else 0
        input_ids = _argument(self._owner_signature, args, kwargs, "input_ids")
        self._context = _CallContext(cache=cache, past=past, mask=mask, input_ids=input_ids)
        self._pending_update = None

    def _after_decoder(self, module, args, output):
        self._context = None
        self._pending_update = None

    def _after_layer(self, module, args, kwargs, output):
        hidden = output if isinstance(output, torch.Tensor) else output[0]
        steps = hidden.shape[1]
        context = self._context
        cache = _argument(self._layer_signature, args, kwargs, "cache", "past_key_values")
        mask = None
        if context is not None and context.mask is not None:
            mask = context.mask[:, -steps:].to(device=hidden.device, dtype=torch.bool)
            if bool(mask.all()):
                mask = None  # no padding in this chunk: skip the per-step selects
        state = None
        if cache is not None:
            if context is not None and context.cache is cache:
                past = context.past
            elif context is None:  # the layer was called on its own; layers <= this one already saw the chunk
                past = int(cache.get_seq_length()) - steps
            else:
                past = 0  # the model created this cache inside the forward: a new sequence
            if past > 0:
                stored = self._states.get(cache)
                if stored is None or stored.length != past:
                    raise ValueError(
                        f"the SSM adapter has no recurrent state for this cache at length {past} "
                        f"(it has {'none' if stored is None else stored.length}): a cache that was cropped, or "
                        "filled without the adapter, cannot be continued; start from an empty cache"
                    )
                state = stored.state
        input_ids = None
        if context is not None and context.input_ids is not None:
            input_ids = context.input_ids[:, -steps:].to(hidden.device)
        update, final_state = self.ssm_adapter(hidden, state=state, mask=mask, input_ids=input_ids)
        if cache is not None:
            self._follow(cache)
            self._states[cache] = _StoredState(final_state, past + steps)
        if self.adapter_config.readout == "classifier":
            self._adapter_logits = update
            return output
        if self.writes_later:
            self._pending_update = update
            return output
        return _with_hidden(output, hidden + update)

    def _add_update(self, module, args, output):
        """The write layer's hook: add the update the read layer's hook computed in this forward."""
        update, self._pending_update = self._pending_update, None
        if update is None:
            raise ValueError(
                f"decoder layer {self.adapter_write_layer_index} (the adapter's write layer) ran without layer "
                f"{self.adapter_layer_index} (its read layer) before it in the same forward"
            )
        hidden = output if isinstance(output, torch.Tensor) else output[0]
        return _with_hidden(output, hidden + update.to(hidden.device))

    def _follow(self, cache) -> None:
        """Wrap this cache instance's batch operations so the stored adapter state follows its rows."""
        if getattr(cache, "_hf_ssm_followed", False):
            return
        states, ref = self._states, weakref.ref(cache)
        ops = {
            "reorder_cache": lambda s, idx: s.index_select(0, idx.to(s.device)),
            "batch_select_indices": lambda s, idx: s[idx.to(s.device)],
            "batch_repeat_interleave": lambda s, repeats: s.repeat_interleave(repeats, dim=0),
        }
        for name, op in ops.items():
            original = getattr(cache, name, None)
            if original is None:
                continue

            def wrapped(arg, _original=original, _op=op):
                _original(arg)
                target = ref()
                stored = states.get(target) if target is not None else None
                if stored is not None:
                    stored.state = _map_state(stored.state, lambda s: _op(s, arg))

            setattr(cache, name, wrapped)
        cache._hf_ssm_followed = True

    # --- the model interface -----------------------------------------------------------------------------

    def forward(self, *args, **kwargs):
        self._adapter_logits = None
        output = self.base_model(*args, **kwargs)
        if self.adapter_config.readout == "classifier":
            output["adapter_logits"] = self._adapter_logits
        return output

    def generate(self, *args, **kwargs):
        return self.base_model.generate(*args, **kwargs)

    def adapter_parameters(self) -> list[nn.Parameter]:
        """The adapter's trainable parameters (frozen mixer parameters excluded)."""
        return [p for p in self.ssm_adapter.parameters() if p.requires_grad]

    def adapter_state_dict(self) -> dict[str, torch.Tensor]:
        return {WEIGHTS_PREFIX + k: v for k, v in self.ssm_adapter.state_dict().items()}

    def save_pretrained(self, save_directory: str | os.PathLike, **kwargs) -> None:
        """Write adapter_config.json and adapter_model.safetensors (only the adapter: no base weight)."""
        from safetensors.torch import save_file

        directory = Path(save_directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.adapter_config.save_pretrained(directory)
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in self.adapter_state_dict().items()}
        tmp = directory / f".{ADAPTER_WEIGHTS_NAME}.tmp"
        save_file(tensors, str(tmp), metadata={"format": "pt", "adapter_type": self.adapter_config.adapter_type})
        os.replace(tmp, directory / ADAPTER_WEIGHTS_NAME)

    def unload(self) -> nn.Module:
        """Remove the hooks and return the base model (its weights were never changed)."""
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        setattr(self.base_model, _ATTACHED_FLAG, False)
        return self.base_model


def build_adapter(config: SSMAdapterConfig, model: nn.Module, hidden_size: int) -> nn.Module:
    """The adapter module of `config`'s kind for the base `model` of width `hidden_size`: an `SSMAdapter`, or the
    entity tracker (which reads the base's input embeddings)."""
    if config.kind == "entity_tracking":
        from .entity_tracking import EntityTrackingAdapter

        return EntityTrackingAdapter(config, hidden_size, model.get_input_embeddings())
    return SSMAdapter(config, hidden_size)


def attach_ssm_adapter(model: nn.Module, config: SSMAdapterConfig | None = None, freeze_base: bool = True):
    """Freeze `model` and attach a fresh adapter after decoder layer `config.layer_index` (writing after
    `config.write_layer_index` when that is set).

    The adapter's last projection is zero, so the adapted model's logits equal the base's bit for bit until it
    trains. To train a PEFT LoRA alongside, inject it into `adapted.base_model` after attaching (PEFT marks
    only its own parameters trainable and leaves the adapter's alone).
    """
    if isinstance(model, SSMAdapterModel) or getattr(model, _ATTACHED_FLAG, False):
        raise ValueError("this model already has an SSM adapter attached; call .unload() first")
    if not hasattr(model, "config"):
        raise ValueError(f"expected a Hugging Face model with a `.config`, got {type(model).__name__}")
    config = config or SSMAdapterConfig()
    base_config = text_config(model)
    _, layers, _ = find_decoder_layers(model)
    layer_index = config.resolved_layer_index(len(layers))
    write_layer_index = config.resolved_write_layer_index(len(layers))
    config = dataclasses.replace(
        config,
        base_model_name_or_path=config.base_model_name_or_path or getattr(model.config, "_name_or_path", None) or None,
        base_model_type=getattr(model.config, "model_type", None),
        base_hidden_size=base_config.hidden_size,
        base_num_hidden_layers=len(layers),
    )
    if freeze_base:
        for param in model.parameters():
            param.requires_grad_(False)
    reference = next(layers[layer_index].parameters(), None)
    adapter = build_adapter(config, model, base_config.hidden_size)
    if reference is not None:
        adapter.to(reference.device)
    setattr(model, _ATTACHED_FLAG, True)
    return SSMAdapterModel(model, config, adapter, layer_index, write_layer_index)


def check_compatible(config: SSMAdapterConfig, model: nn.Module, allow_other_model_type: bool = False) -> None:
    """Raise ValueError when an adapter trained for one base cannot sit on `model`.

    A different width or layer count always raises. A different `model_type` (an adapter trained on a Llama
    base, loaded onto a Qwen2 of the same shape) raises too, because the features the adapter learnt to read
    come from another network; `allow_other_model_type=True` turns that into a warning (e.g. for a base that
    was converted to another architecture name with the same weights).
    """
    base_config = text_config(model)
    _, layers, name = find_decoder_layers(model)
    if config.base_hidden_size is not None and config.base_hidden_size != base_config.hidden_size:
        raise ValueError(
            f"adapter/base mismatch: the adapter was trained on a base with hidden_size = {config.base_hidden_size}, "
            f"this base has hidden_size = {base_config.hidden_size}"
        )
    if config.base_num_hidden_layers is not None and config.base_num_hidden_layers != len(layers):
        raise ValueError(
            f"adapter/base mismatch: the adapter was trained on a base with num_hidden_layers = "
            f"{config.base_num_hidden_layers}, this base has {len(layers)} ({name})"
        )
    model_type = getattr(model.config, "model_type", None)
    if config.base_model_type is not None and model_type is not None and config.base_model_type != model_type:
        message = (
            f"adapter/base mismatch: the adapter was trained on a {config.base_model_type!r} base "
            f"({config.base_model_name_or_path or 'name not recorded'}), this base is {model_type!r}"
        )
        if not allow_other_model_type:
            raise ValueError(message + "; pass allow_other_model_type=True to load it anyway")
        warnings.warn(message + " (loaded anyway: allow_other_model_type=True)", UserWarning, stacklevel=3)


def load_ssm_adapter(
    model: nn.Module,
    adapter_directory: str | os.PathLike,
    is_trainable: bool = False,
    allow_other_model_type: bool = False,
):
    """Attach the adapter saved in `adapter_directory` to the base `model`; returns an SSMAdapterModel.

    With `is_trainable=False` (default, as in PEFT) the adapter's parameters are frozen too. The base must have
    the width, depth and `model_type` recorded in the adapter config (`allow_other_model_type=True`: another
    model type only warns). If loading fails, `model` is left as it was: no adapter, and every parameter's
    `requires_grad` as before the call.
    """
    from safetensors.torch import load_file

    config = SSMAdapterConfig.from_pretrained(adapter_directory)
    check_compatible(config, model, allow_other_model_type=allow_other_model_type)
    weights_path = Path(adapter_directory) / ADAPTER_WEIGHTS_NAME
    if not weights_path.is_file():
        raise ValueError(f"no {ADAPTER_WEIGHTS_NAME} in {str(adapter_directory)!r}")
    requires_grad = [p.requires_grad for p in model.parameters()]  # attaching freezes the base
    adapted = attach_ssm_adapter(model, config)
    try:
        tensors = rename_legacy_keys(load_file(str(weights_path)))  # weights saved before a renaming, too
        expected = adapted.adapter_state_dict()
        missing, unexpected = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
        wrong = sorted(k for k in set(expected) & set(tensors) if tensors[k].shape != expected[k].shape)
        if missing or unexpected or wrong:
            raise ValueError(
                f"{weights_path} does not fit this adapter config: missing {missing}, unexpected {unexpected}, "
                f"wrong shape {wrong}"
            )
        adapted.ssm_adapter.load_state_dict({k[len(WEIGHTS_PREFIX) :]: v for k, v in tensors.items()})
    except BaseException:
        adapted.unload()
        for param, flag in zip(model.parameters(), requires_grad):
            param.requires_grad_(flag)
        raise
    adapted.ssm_adapter.set_trainable(is_trainable)
    return adapted


__all__ = [
    "SSMAdapterModel",
    "attach_ssm_adapter",
    "build_adapter",
    "check_compatible",
    "find_decoder_layers",
    "load_ssm_adapter",
    "run_to_layer",
]

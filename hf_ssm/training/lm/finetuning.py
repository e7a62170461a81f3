"""Causal-LM fine-tuning of a saved checkpoint: full, or LoRA through PEFT (the library behind scripts/finetune.py).

Any `AutoModelForCausalLM` checkpoint works; hybrid checkpoints load through hf_ssm (or their shipped modeling
code). The loop, data, checkpoints and exact resume are those of `hf_ssm.training.lm.pretraining`.

LoRA targets (`--lora_target_modules`): either comma-separated group names, resolved layer by layer (from
`config.mixers`) to the hybrid model's full module names, or plain module names passed to PEFT as they are (for
other architectures):

| group       | modules (in `model.layers.<i>.mixer` / `.mlp`)                    | mixers                              |
|-------------|-------------------------------------------------------------------|-------------------------------------|
| `attention` | q_proj, k_proj, v_proj, o_proj                                    | attention                           |
| `pd_ssm`    | selection (W_s) or transition_proj (W_P, direct transitions), magnitude.up, phase.up (the D generators), in_proj (B), out_proj (C), those the layer has | pd_ssm |
| `lru`       | in_proj (W_v), gate_proj (W_g), out_proj (W_o)                    | bd_lru, h_lru, diag_lru             |
| `lrc`       | in_proj (the input matrices of every gate), out_proj              | lrc_ssm, gru_ssm, mgu_ssm, lstm_ssm |
| `lstm`      | out_proj (nn.LSTM's own matrices are not nn.Linear)               | lstm                                |
| `ssm`       | pd_ssm + lru + lrc + lstm (+ any other registered mixer's group)  | every SSM mixer                     |
| `mlp`       | gate_proj, up_proj, down_proj                                     | the SwiGLU MLP of every block       |

The SSM groups are the mixers' registry declarations (`lora_group`, `lora_targets` in
hf_ssm/modeling/mixer_registry.py), so a newly registered mixer brings its group with it.

Mixer parameters that are not `nn.Linear` (the PD-SSM transition dictionary and skip, the head-wise
output weights of its magnitude / phase MLPs, the LRC cell gains) stay frozen under LoRA; a full fine-tune trains
them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ...modeling.mixer_registry import ATTENTION, mixer_names, mixer_spec
from ..checkpointing import atomic_save_dir
from ..distributed import plain_class, process_layout
from ..loop import make_accelerator, open_run
from ..settings_base import help_field
from .lm_settings import (
    RESUME_SAFE_SETTINGS,
    DataSettings,
    TrainSettings,
    check_block_size,
    load_tokenizer,
    open_block_sources,
    validate_train_settings,
)
from .outputs import closing_sample, model_summary, run_metrics, write_run_files
from .pretraining import train_loop

# Groups that are not an SSM mixer's: group -> (the mixers whose layers it applies to (None: every block's MLP),
# the projection names). The SSM groups come from the mixers' registry declarations (lora_group, lora_targets).
_NON_SSM_GROUPS: dict[str, tuple[tuple[str, ...] | None, tuple[str, ...]]] = {
    "attention": ((ATTENTION,), ("q_proj", "k_proj", "v_proj", "o_proj")),
    "mlp": (None, ("gate_proj", "up_proj", "down_proj")),
}


def lora_target_groups() -> dict[str, tuple[tuple[str, ...] | None, tuple[str, ...]]]:
    """group -> (the mixers whose layers it applies to (None: every block's MLP), the projection names): attention,
    mlp, and one group per `lora_group` of the registered SSM mixers (pd_ssm, lru, lrc, ...)."""
    groups: dict = {"attention": _NON_SSM_GROUPS["attention"]}
    for name in mixer_names():
        spec = mixer_spec(name)
        kinds, projections = groups.get(spec.lora_group, ((), ()))
        groups[spec.lora_group] = ((*kinds, name), tuple(dict.fromkeys((*projections, *spec.lora_targets))))
    return {**groups, "mlp": _NON_SSM_GROUPS["mlp"]}


def ssm_groups() -> tuple[str, ...]:
    """The groups `ssm` stands for: every registered SSM mixer's."""
    return tuple(dict.fromkeys(mixer_spec(name).lora_group for name in mixer_names()))


SAVE_MODES = ("adapter", "merged", "both")


def lora_target_modules(spec: str, model=None) -> list[str]:
    """PEFT `target_modules` for a comma-separated spec.

    Group names (attention, ssm, pd_ssm, lru, lrc, mlp) resolve, layer by layer from `model.config.mixers`, to
    the full module names of a hybrid model (so PD-SSM's and BD-LRU's `out_proj`, or BD-LRU's and the MLP's
    `gate_proj`, are told apart); any other names are returned as given (PEFT matches them as name suffixes).
    """
    items = [item.strip() for item in spec.split(",") if item.strip()]
    if not items:
        raise ValueError("--lora_target_modules is empty")
    target_groups = lora_target_groups()
    known = (*target_groups, "ssm")
    named = [item for item in items if item in known]
    if not named:
        return items
    if len(named) != len(items):
        unknown = [item for item in items if item not in known]
        raise ValueError(f"--lora_target_modules mixes group names and module names {unknown}; use one kind")
    groups = [g for item in items for g in (ssm_groups() if item == "ssm" else (item,))]
    if model is None:
        return items
    mixers = getattr(model.config, "mixers", None)
    if mixers is None:
        raise ValueError(
            f"--lora_target_modules groups need an hf_ssm hybrid model ({type(model).__name__} has no mixers); "
            "pass module names instead, e.g. q_proj,v_proj"
        )
    existing = {name for name, _ in model.named_modules()}
    targets = []
    for i, mixer in enumerate(mixers):
        for group in dict.fromkeys(groups):
            kinds, projections = target_groups[group]
            if kinds is None:
                targets += [f"model.layers.{i}.mlp.{p}" for p in projections]
            elif mixer in kinds:  # the layer's own mixer's targets, not its whole group's
                own = projections if mixer == ATTENTION else mixer_spec(mixer).lora_targets
                targets += [f"model.layers.{i}.mixer.{p}" for p in own]
    targets = [t for t in dict.fromkeys(targets) if t in existing]
    if not targets:
        raise ValueError(f"--lora_target_modules {spec!r} matches no layer of this model (mixers {mixers})")
    return targets


@dataclass
class FinetuneSettings(DataSettings, TrainSettings):
    """A fine-tuning run: the checkpoint, LoRA or full, its data and training (fine-tuning's own defaults)."""

    DEFAULTS = {
        "dataset": "builtin:dialogues",
        "tokenizer": None,
        "max_steps": 150,
        "learning_rate": 1e-3,
        "warmup_steps": 10,
        "weight_decay": 0.0,
        "eval_every": 25,
        "save_every": 50,
    }
    HELP = {"tokenizer": "fine-tuning: None = the one saved with --model"}

    model: str | None = help_field(
        "the checkpoint to fine-tune: a folder written by save_pretrained (or a Hub name)", default=None
    )
    lora: bool = help_field("train LoRA adapters (PEFT) instead of every weight", default=False)
    lora_r: int = help_field("LoRA rank", default=8)
    lora_alpha: float = help_field("LoRA alpha (scale = alpha / r)", default=16.0)
    lora_dropout: float = help_field("dropout on the LoRA input", default=0.0)
    lora_target_modules: str = help_field(
        "comma-separated groups (attention, ssm, pd_ssm, lru, lrc, mlp) or module names (see docs/training.md)",
        default="attention,ssm",
    )
    save: str = help_field("with --lora: save the `adapter`, the `merged` model, or `both`", default="both")

    def validate(self) -> None:
        validate_train_settings(self)
        if not self.model:
            raise ValueError("--model is required: the checkpoint folder to fine-tune (e.g. runs/pretrain/<run>/model)")
        if self.save not in SAVE_MODES:
            raise ValueError(f"--save must be one of {list(SAVE_MODES)}, got {self.save!r}")
        if self.lora:
            if self.lora_r < 1:
                raise ValueError(f"--lora_r must be >= 1, got {self.lora_r}")
            lora_target_modules(self.lora_target_modules)  # checks the spec; resolved against the model later
        looks_local = self.model.startswith((".", "/", "~")) or Path(self.model).exists()
        if looks_local and not (Path(self.model) / "config.json").is_file():
            raise ValueError(f"--model {self.model}: no config.json there (a folder written by save_pretrained)")


def load_causal_lm(path: str, trust_remote_code: bool = False):
    """AutoModelForCausalLM in float32. Importing hf_ssm (the parent package of this module) registered the hybrid
    classes with the Auto classes, so hybrid checkpoints need no remote code."""
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(path, trust_remote_code=trust_remote_code, dtype=torch.float32)
    except Exception as err:
        raise ValueError(f"could not load the model {path!r}: {err}") from err


def add_lora(model, settings: FinetuneSettings):
    """Wrap `model` with PEFT LoRA adapters; every other weight is frozen."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=settings.lora_r,
        lora_alpha=settings.lora_alpha,
        lora_dropout=settings.lora_dropout,
        target_modules=lora_target_modules(settings.lora_target_modules, model),
        task_type="CAUSAL_LM",
    )
    try:
        return get_peft_model(model, config)
    except ValueError as err:  # PEFT: target modules not found
        raise ValueError(f"--lora_target_modules {settings.lora_target_modules!r}: {err}") from err


def check_lora_layout(settings: FinetuneSettings, accelerator) -> None:
    """ValueError for LoRA under FSDP: the adapters are merged into the base weights at the end, which needs every
    process to hold whole weights (one process or DDP), not shards."""
    if settings.lora and accelerator is not None and process_layout(accelerator)["distributed_type"] == "FSDP":
        raise ValueError(
            "--lora is not supported under FSDP (merging the adapters needs unsharded weights): fine-tune with LoRA "
            "on one process or with DDP (scripts/configs/multi_gpu.yaml, cpu_ddp.yaml), or drop --lora to fine-tune "
            "every weight under FSDP"
        )


@dataclass
class PreparedFinetune:
    tokenizer: object
    model: torch.nn.Module
    train_source: object
    eval_data: tuple


def prepare_finetuning(settings: FinetuneSettings, accelerator=None, validated: bool = False) -> PreparedFinetune:
    """Validate (unless the caller did: `validated`), load model and tokenizer, wrap LoRA, open the data; ValueError
    with a clear message on bad input."""

    from accelerate.utils import set_seed

    if not validated:
        settings.validate()
    check_lora_layout(settings, accelerator)
    tokenizer = load_tokenizer(settings.tokenizer or settings.model, settings.trust_remote_code)
    model = load_causal_lm(settings.model, settings.trust_remote_code)
    check_block_size(settings.block_size, model.config)
    if len(tokenizer) > model.config.vocab_size:
        raise ValueError(f"the tokenizer has {len(tokenizer)} tokens, the model's vocabulary {model.config.vocab_size}")
    set_seed(settings.seed)  # LoRA A matrices are initialised randomly
    if settings.lora:
        model = add_lora(model, settings)
    train_source, eval_data = open_block_sources(settings, tokenizer, accelerator)
    return PreparedFinetune(tokenizer, model, train_source, eval_data)


def finetune(settings: FinetuneSettings, run_dir, resume: bool = False, accelerator=None, prepared=None) -> dict:
    """Fine-tune; writes run_dir/{settings.json, metrics.json, loss_curve.png, checkpoints/} and
    `model/` (full fine-tune or merged LoRA: save_pretrained + tokenizer + card) and/or `adapter/` (LoRA only)."""
    from ...model_card import render_model_card

    accelerator = accelerator or make_accelerator(settings.mixed_precision)
    check_lora_layout(settings, accelerator)  # also when the caller prepared the run without an accelerator
    prepared = prepared or prepare_finetuning(settings, accelerator)
    run_dir = Path(run_dir)
    open_run(accelerator, settings, run_dir, resume, RESUME_SAFE_SETTINGS)
    model, tokenizer = prepared.model, prepared.tokenizer
    base_config = model.get_base_model().config if settings.lora else model.config
    info = model_summary(base_config, model)
    model, state = train_loop(
        model, tokenizer, prepared.train_source, prepared.eval_data, settings, run_dir, accelerator, resume,
        desc=f"finetune{' (LoRA)' if settings.lora else ''}",
    )  # fmt: skip
    unwrapped = accelerator.unwrap_model(model)
    extra = {"base_model": settings.model, "tokenizer": settings.tokenizer or settings.model}
    lora_info = None
    if settings.lora:
        lora_info = {
            "r": settings.lora_r,
            "alpha": settings.lora_alpha,
            "dropout": settings.lora_dropout,
            "target_modules": settings.lora_target_modules,
            "wrapped_modules": sorted(
                name for name, module in unwrapped.named_modules() if hasattr(module, "lora_A") and name
            ),
            "trainable_parameters": info["trainable_parameters"],
        }
        extra["lora"] = lora_info
    if sample := closing_sample(settings, prepared.eval_data, tokenizer, model, accelerator):
        extra["sample"] = sample
    metrics = run_metrics("finetune", settings, state, accelerator, info, extra)
    write_run_files(run_dir, metrics, accelerator)

    state_dict = accelerator.get_state_dict(model)  # collective under FSDP
    if accelerator.is_main_process:
        name = f"{Path(settings.model).name if Path(settings.model).name != 'model' else Path(settings.model).parent.name}-finetuned"
        card = {"model_name": name, "base_model": settings.model}
        if settings.lora and settings.save in ("adapter", "both"):

            def write_adapter(tmp: Path) -> None:
                unwrapped.save_pretrained(tmp)
                (tmp / "README.md").write_text(render_model_card(base_config, metrics, adapter=lora_info, **card))

            atomic_save_dir(run_dir / "adapter", write_adapter)
        if not settings.lora or settings.save in ("merged", "both"):
            if settings.lora:  # W + (alpha / r) B A into every wrapped layer (in place: the adapter is saved already)
                full, full_state = unwrapped.merge_and_unload(), None
            else:
                full, full_state = unwrapped, state_dict

            def write_model(tmp: Path) -> None:
                with plain_class(full) as plain:  # FSDP2 swaps the model's class (distributed.plain_class)
                    plain.save_pretrained(tmp, state_dict=full_state, safe_serialization=True)
                tokenizer.save_pretrained(tmp)
                params = sum(p.numel() for p in full.parameters())
                (tmp / "README.md").write_text(render_model_card(full.config, metrics, parameters=params, **card))

            atomic_save_dir(run_dir / "model", write_model)
    accelerator.wait_for_everyone()
    return metrics


__all__ = [
    "FinetuneSettings",
    "add_lora",
    "finetune",
    "load_causal_lm",
    "lora_target_groups",
    "lora_target_modules",
    "prepare_finetuning",
]

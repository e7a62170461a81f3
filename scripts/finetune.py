"""Fine-tune a causal LM checkpoint (an Accelerate program): full fine-tuning or LoRA (PEFT).

Any AutoModelForCausalLM checkpoint works; the default data is the built-in generated question/answer corpus
(`builtin:dialogues`), offline. Examples:

    python scripts/finetune.py --model runs/pretrain/<run>/model --lora
    python scripts/finetune.py --model runs/pretrain/<run>/model --lora --lora_target_modules attention,ssm,mlp \\
        --save adapter
    python scripts/finetune.py --model runs/pretrain/<run>/model --train_files chat.jsonl --text_column text
    accelerate launch --config_file scripts/configs/multi_gpu.yaml scripts/finetune.py --model <path> --lora ...

LoRA target groups (--lora_target_modules, comma-separated): attention (q/k/v/o_proj), pd_ssm (selection,
in_proj, out_proj), lru (in_proj, gate_proj, out_proj of bd_lru / h_lru / diag_lru), lrc (in_proj,
out_proj of lrc / gru / mgu / lstm_ssm), ssm (all three), mlp (gate/up/down_proj); or plain module names for
other architectures. The run folder holds settings.json, metrics.json, loss_curve.png, checkpoints/ (--resume),
adapter/ (LoRA: adapter_config.json + adapter_model.safetensors) and model/ (the merged or fully fine-tuned
model with tokenizer and model card). See docs/training.md.
"""

from __future__ import annotations

import argparse
import sys
import time

from hf_ssm.training import cli
from hf_ssm.training.lm.finetuning import FinetuneSettings, finetune, prepare_finetuning
from hf_ssm.training.lm.lm_settings import RESUME_SAFE_SETTINGS


def build_parser() -> argparse.ArgumentParser:
    parser = cli.settings_parser(FinetuneSettings, description=__doc__)
    cli.add_run_folder_arguments(parser, "runs/finetune/<time>")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    settings, accelerator, prepared = cli.start_run(
        parser, args, FinetuneSettings, RESUME_SAFE_SETTINGS, prepare_finetuning
    )
    out = cli.run_folder(args.output_dir, "runs/finetune/")
    began = time.perf_counter()
    metrics = finetune(settings, out, resume=args.resume, accelerator=accelerator, prepared=prepared)
    if accelerator.is_main_process:
        model = metrics["model"]
        print(f"\nrun folder: {out}")
        trained = f"{model['trainable_parameters']:,} of {model['parameters']:,} parameters trained"
        cli.print_training_summary(metrics, f"{trained}, {metrics['steps']} steps", began)
    return 0


if __name__ == "__main__":
    sys.exit(main())

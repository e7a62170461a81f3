"""Pretrain a hybrid attention / SSM language model (an Accelerate program).

With no arguments: a tiny PD-SSM / attention hybrid (preset hybrid-pd_ssm-tiny) on the built-in generated story
corpus with the built-in byte-level tokenizer -- offline, a few minutes on a 2-core CPU. Examples:

    python scripts/pretrain.py
    python scripts/pretrain.py --model_preset hybrid-bd_lru-small --dataset wikitext --dataset_config wikitext-103-raw-v1 \\
        --tokenizer gpt2 --block_size 1024 --batch_size 16 --max_steps 20000 --learning_rate 6e-4
    python scripts/pretrain.py --train_files corpus/*.jsonl --streaming --model_preset pd_ssm-small
    accelerate launch --config_file scripts/configs/multi_gpu.yaml scripts/pretrain.py --model_preset hybrid-pd_ssm-base ...
    accelerate launch --config_file scripts/configs/fsdp.yaml --num_processes 8 scripts/pretrain.py --model_preset ...
    python scripts/pretrain.py --output_dir runs/pretrain/my_run --resume      # continue after an interruption

The run folder holds settings.json, launch.json (the process layout of each launch), config.json, metrics.json
(loss / lr per step, evaluations), loss_curve.png, checkpoints/step_N (accelerator.save_state; --resume continues
exactly) and model/ (save_pretrained: safetensors + modeling code, tokenizer, model card README.md). See
docs/training.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from hf_ssm.training import cli
from hf_ssm.training.lm.lm_settings import RESUME_SAFE_SETTINGS, PretrainSettings
from hf_ssm.training.lm.pretraining import prepare_pretraining, pretrain


def build_parser() -> argparse.ArgumentParser:
    parser = cli.settings_parser(PretrainSettings, description=__doc__)
    cli.add_run_folder_arguments(parser, "runs/pretrain/<preset>-<time>")
    parser.add_argument("--list_presets", action="store_true", help="print the model presets and exit")
    return parser


def list_presets() -> None:
    from hf_ssm.presets import PRESETS

    for name in sorted(PRESETS):
        fields = PRESETS[name]
        print(
            f"{name:28s} d={fields['hidden_size']:<4d} layers={fields['num_hidden_layers']:<3d} mixers={fields['mixers']}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list_presets:
        list_presets()
        return 0
    settings, accelerator, prepared = cli.start_run(
        parser, args, PretrainSettings, RESUME_SAFE_SETTINGS, prepare_pretraining
    )
    name = settings.model_preset or Path(settings.config).stem
    out = cli.run_folder(args.output_dir, f"runs/pretrain/{name}-")
    began = time.perf_counter()
    metrics = pretrain(settings, out, resume=args.resume, accelerator=accelerator, prepared=prepared)
    if accelerator.is_main_process:
        print(f"\nrun folder: {out}  (model: {out / 'model'})")
        trained = (
            f"{metrics['model']['parameters']:,} parameters, {metrics['steps']} steps, "
            f"{metrics['tokens_seen']:,} tokens, {metrics['num_processes']} process(es)"
        )
        cli.print_training_summary(metrics, trained, began)
    return 0


if __name__ == "__main__":
    sys.exit(main())

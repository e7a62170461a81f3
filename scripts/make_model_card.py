"""Write the Hugging Face model card (README.md) of a saved hf_ssm model or LoRA adapter.

The card has YAML front matter (library, tags, datasets, metrics, model-index), the architecture (mixer of every
layer, sizes, parameter count), the training settings and the evaluation results, read from the run's
metrics.json. The front matter is built with huggingface_hub's ModelCardData and the card is read back through its
ModelCard before it is written (offline; hf_ssm.model_card.check_model_card). scripts/pretrain.py and scripts/finetune.py write it into every saved model automatically; use this
script to regenerate it, or to write a copy elsewhere (e.g. model_cards/). Examples:

    python scripts/make_model_card.py runs/pretrain/<run>/model
    python scripts/make_model_card.py runs/pretrain/<run>/model --output model_cards/hybrid-pd_ssm-tiny.md
    python scripts/make_model_card.py runs/finetune/<run>/adapter --run_dir runs/finetune/<run>
"""

from __future__ import annotations

import argparse
import sys

from hf_ssm.model_card import write_model_card


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", help="folder written by save_pretrained (config.json) or a LoRA adapter folder")
    parser.add_argument("--run_dir", default=None, help="run folder with metrics.json (default: model_dir's parent)")
    parser.add_argument("--output", default=None, help="where to write the card (default: model_dir/README.md)")
    parser.add_argument("--model_name", default=None, help="title of the card (default: from the folder names)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    kwargs = {"model_name": args.model_name} if args.model_name else {}
    try:
        path = write_model_card(args.model_dir, run_dir=args.run_dir, output=args.output, **kwargs)
    except ValueError as err:
        parser.error(str(err))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

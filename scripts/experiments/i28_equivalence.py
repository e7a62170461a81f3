"""Issue 28: the bisection reference at the layer's sizes computes what the package's layer computes.

Builds the layer of `--recipe direct --pd_ssm_output_init identity --pd_ssm_transition_init_scale 1` (d = 256, P_t's
logits W_P RMSNorm(u_t), C the frozen identity, the post-norm block's LayerNorm, the classifier) and
i28_bisect.py's reference with `--table linear --readout layernorm --hidden 256`, copies the layer's weights into
the reference (the layer's per-head [Re x, Im x] features permuted into the reference's [x, 0] order), and prints
the largest differences of the logits and of the gradients of W_P and of the norm's gain on one training batch.

    OMP_NUM_THREADS=1 python scripts/experiments/i28_equivalence.py
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from hf_ssm.data.state_tracking import StateTrackingDataset, collate_state_tracking, get_task
from hf_ssm.training.recipes import resolve_settings
from hf_ssm.training.state_tracking import StateTrackingSettings, build_model

_spec = importlib.util.spec_from_file_location("i28_bisect", Path(__file__).with_name("i28_bisect.py"))
i28_bisect = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(i28_bisect)


def main() -> None:
    heads, states = 16, 8
    values = {"task": "a5", "seed": 3, "pd_ssm_output_init": "identity", "pd_ssm_transition_init_scale": 1.0}
    settings = StateTrackingSettings(**resolve_settings("direct", values))
    settings.validate()
    layer = build_model(settings)
    task = get_task("a5")
    reference = i28_bisect.Variant(task.vocab_size, task.num_classes, heads, states, "linear", "layernorm", 256)
    mixer, norm = layer.model.layers[0].mixer, layer.model.layers[0].output_layernorm
    # layer feature f = h * 2N + c * N + n (c = 0: Re, 1: Im)  <->  reference feature c * H N + h * N + n
    f = torch.arange(2 * heads * states)
    to_reference = (f // states) % 2 * heads * states + f // (2 * states) * states + f % states
    layer_of = torch.empty_like(to_reference)
    layer_of[to_reference] = f
    with torch.no_grad():
        reference.embed.weight.copy_(layer.model.embed_tokens.weight)
        reference.norm_in.weight.copy_(mixer.transition_norm.weight)
        reference.proj.weight.copy_(mixer.transition_proj.weight)
        reference.norm_out.weight.copy_(norm.weight[layer_of])
        reference.norm_out.bias.copy_(norm.bias[layer_of])
        reference.readout.weight.copy_(layer.score.weight[:, layer_of])
        reference.readout.bias.copy_(layer.score.bias)
    data = StateTrackingDataset(task, 16, 3, 40, seed=0)
    batch = collate_state_tracking([data[i] for i in range(16)])
    ids, labels = batch["input_ids"], batch["labels"]
    layer_logits = layer(input_ids=ids, attention_mask=(ids != 0).long()).logits
    reference_logits = reference(ids)
    labelled = labels != -100
    loss = torch.nn.functional.cross_entropy
    loss(layer_logits.flatten(0, 1), labels.flatten()).backward()
    loss(reference_logits.flatten(0, 1), labels.flatten()).backward()
    print(f"logits: max |difference| {(layer_logits - reference_logits)[labelled].abs().max():.2e}")
    for name, a, b in (
        ("W_P", mixer.transition_proj.weight.grad, reference.proj.weight.grad),
        ("norm gain", mixer.transition_norm.weight.grad, reference.norm_in.weight.grad),
    ):
        print(f"gradient of {name}: max |difference| {(a - b).abs().max():.2e} (max |gradient| {b.abs().max():.2e})")


if __name__ == "__main__":
    main()

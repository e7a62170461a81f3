"""What an adapter run reports: the summary records (results/adapter/summary.json), the results table, the plot and
the SSM adapter's model card."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from huggingface_hub import ModelCardData

from ...adapters.bases import NAMED_BASES
from ...adapters.config import SSMAdapterConfig
from ...model_card import check_model_card
from ..legacy_settings import config_item
from ..reports import accuracy_cells, markdown_table, merge_summary, pyplot, save_figure
from .experiment_settings import TINY_BASE, AdapterExperimentSettings, default_preset, preset_values

# --- reporting ---------------------------------------------------------------------------------------------


def model_name(result: dict) -> str:
    """Short name of a method's model for summaries: "pd_ssm adapter @L3", "lora r=4", "linear probe"."""
    settings = result["settings"]
    if result["method"] == "probe":
        return "linear probe (last hidden state)"
    if result["method"] == "fewshot":
        return f"untrained base, {result['settings']['fewshot_examples']}-shot"
    if result["method"] == "lora":
        return f"lora r={result['lora_rank']}"
    if result["method"] == "lora_classifier":
        return (
            f"lora r={result['lora_rank']} (attention, layers 0-{settings['layer_index']}) @L{settings['layer_index']}"
        )
    kind = settings.get("adapter_kind", "mixer")
    name = (
        f"{'entity-tracking' if kind == 'entity_tracking' else settings['mixer']} adapter @L{settings['layer_index']}"
    )
    if settings.get("write_layer_index") is not None:
        name += f" -> L{settings['write_layer_index']}"
    if settings.get("classifier_per_head"):
        name += ", a readout per head"
    if settings.get("train_max_preamble_sentences"):
        name += f", trained after up to {settings['train_max_preamble_sentences']} preamble sentences"
    return name + (f" + lora r={result['lora_rank']}" if result["method"] == "ssm_lora" else "")


def bucket_label(bucket: dict) -> str:
    """A test bucket's name: "11-20" (transitions), "n5:5-5" for a bucket of the shuffled-objects task's stories of
    5 objects, "heldout/n5:5-5" for one of its held-out stories (the bucket's "variety")."""
    label = f"{bucket['min_transitions']}-{bucket['max_transitions']}"
    label = f"n{bucket['objects']}:{label}" if "objects" in bucket else label
    return f"{bucket['variety']}/{label}" if "variety" in bucket else label


def summary_records(summary: dict, run_dir: str, command: str | None = None) -> list[dict]:
    """One record per method of a run, for results/adapter/summary.json; `command`: the command line that made it
    (recorded so that every figure can be re-run)."""
    records = []
    for r in summary["results"]:
        records.append(
            {
                "base": summary["base"].get("base_model", summary["base_source"]),
                "task": summary["task"],
                "model": model_name(r),
                "method": r["method"],
                "readout": r["readout"],
                "seed": r["settings"]["seed"],
                "preset": summary["settings"]["preset"],  # the named recipe (experiment_settings) under the flags given
                "trainable_params": r["trainable_parameters"],
                "cpu_seconds": round(r["cpu_seconds"], 1),
                "wall_seconds": round(r["train_seconds"] + r["eval_seconds"], 1),
                "steps": r["steps"],
                "train_transitions": [r["settings"]["train_min_transitions"], r["settings"]["train_max_transitions"]],
                "accuracy_by_transitions": {bucket_label(b): round(b["accuracy"], 4) for b in r["test"]["buckets"]},
                "eval_samples_per_bucket": r["settings"]["eval_samples_per_bucket"],
                "mean_tokens_by_transitions": {
                    bucket_label(b): round(b["mean_tokens"], 1) for b in r["test"]["buckets"]
                },
                "run_dir": run_dir,
                **({"command": command} if command else {}),
            }
        )
    return records


# What identifies a record of results/adapter/summary.json: merging a run again replaces its records.
SUMMARY_KEY = ("run_dir", "method", "seed")


def update_summary_json(path, records: list[dict]) -> None:
    """Merge `records` into the JSON list at `path` under the summary file's lock (reports.merge_summary): a record
    of the same run, method and seed is replaced."""
    merge_summary(path, records, key=SUMMARY_KEY, indent=1)


def results_table(results: list[dict], num_classes: int | None = None) -> str:
    """Markdown: one row per method, accuracy (%) per bucket of transitions."""
    cols = [bucket_label(b) for b in results[0]["test"]["buckets"]]
    rows = [
        [r["method"], r["trainable_parameters"], r["steps"], f"{r['train_seconds']:.0f}"]
        + accuracy_cells(r["test"]["buckets"])
        for r in results
    ]
    if num_classes:  # a bucket of n objects: chance 1 / n
        chance = [100 / b.get("objects", num_classes) for b in results[0]["test"]["buckets"]]
        rows.append(["chance", "", "", ""] + [f"{c:.1f}" for c in chance])
    return markdown_table(["method", "trainable params", "steps", "train s", *cols], rows)


def plot_results(results: list[dict], settings: AdapterExperimentSettings, num_classes: int, path: Path) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        # one line per number of objects where the buckets have one (the shuffled-objects task), and per variety
        groups = sorted({(b.get("variety", ""), b.get("objects", 0)) for b in r["test"]["buckets"]})
        for variety, objects in groups:
            buckets = [
                b for b in r["test"]["buckets"] if (b.get("variety", ""), b.get("objects", 0)) == (variety, objects)
            ]
            xs = [(b["min_transitions"] + b["max_transitions"]) / 2 for b in buckets]
            label = r["method"] + (f", n={objects}" if objects else "") + (f", {variety}" if variety else "")
            ax.plot(xs, [b["accuracy"] for b in buckets], marker="o", label=label)
    ax.axvspan(settings.train_min_transitions, settings.train_max_transitions, color="grey", alpha=0.15, label="train")
    ax.axhline(1 / num_classes, color="black", linestyle=":", label="chance")
    ax.set(
        title=f"{settings.task} (NL stories)",
        xlabel="transitions in the story",
        ylabel="answer accuracy",
        ylim=(0, 1.02),
    )
    ax.legend()
    save_figure(fig, path)


def _training_stories_description(settings: AdapterExperimentSettings) -> str:
    """The model card's sentence on the training stories: their transition counts, and the sentences that change
    nothing (an opening preamble, distractors between transitions) when the run added any."""
    text = f"Trained on {settings.train_min_transitions}-{settings.train_max_transitions} transitions"
    if settings.train_max_preamble_sentences:
        preamble = settings.train_max_preamble_sentences
        text += f", each story opened by 0-{preamble} sentences that change nothing (the test stories have none)"
    if settings.distractor_prob:
        # the test stories draw distractors with the same probability (scoring.evaluate)
        text += f", with a distractor sentence before each transition with probability {settings.distractor_prob}"
    return text


def reproduce_flags(settings: AdapterExperimentSettings) -> str:
    """The flags of scripts/train_adapter.py that give `settings` again: the task, the base, the preset unless it is
    the one the base and task take by default, and every value that differs from the defaults under that preset."""
    start = {
        **asdict(AdapterExperimentSettings()),
        **preset_values(settings.base_model, settings.task, settings.preset),
    }
    flags = []
    for name, value in asdict(settings).items():
        if name == "preset":
            if value != default_preset(settings.base_model, settings.task):
                flags.append(f"--preset {value}")
        elif name == "extra_config":  # the keys that differ from the preset's (the flag merges over them)
            items = [config_item(k, v) for k, v in value.items() if start[name].get(k, _UNSET) != v]
            flags += [f"--extra_config {' '.join(items)}"] if items else []
        elif value != start[name] or name == "task":
            flags.append(f"--{name} {value if value != '' else repr('')}")
    return " ".join(flags)


_UNSET = object()


def model_card(settings: AdapterExperimentSettings, base_info: dict, ssm: dict, table: str) -> str:
    """A Hugging Face model card (YAML front matter) for the trained SSM adapter."""
    tiny = settings.base_model == TINY_BASE
    base = "the built-in tiny Qwen2 of scripts/train_adapter.py, not on the hub" if tiny else settings.base_model
    load_base = (
        "from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast\n"
        'base = AutoModelForCausalLM.from_pretrained("<run folder>/base")\n'
        'tokenizer = PreTrainedTokenizerFast.from_pretrained("<run folder>/base")  # word level'
        if tiny
        else "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        f'base = AutoModelForCausalLM.from_pretrained("{settings.base_model}")\n'
        f'tokenizer = AutoTokenizer.from_pretrained("{settings.base_model}", padding_side="left")'
    )
    named = NAMED_BASES.get(settings.base_model)
    if named is not None:
        base = f"{settings.base_model}: {named.description}"
        load_base = f'from hf_ssm.adapters import load_base\n\nbase, tokenizer = load_base("{settings.base_model}")'
    classifier = ssm["method"] == "ssm_classifier"
    reproduce = reproduce_flags(settings)
    config, mixer, mixer_settings, branch = _card_adapter(settings, classifier)
    read = (
        'scores = model(**batch)["adapter_logits"][:, -1]  # (B, num_classes): the answer classes, in task order'
        if classifier
        else "scores = model(**batch).logits[:, -1, answer_token_ids]  # hf_ssm.data.nl_state_tracking.answer_token_ids"
    )
    data = ModelCardData(
        library_name="hf_ssm",
        license="apache-2.0",
        base_model=None if tiny else (named.hub_id if named else settings.base_model),
        tags=["ssm-adapter", mixer.replace("_", "-"), "state-tracking"],
        pipeline_tag="text-generation",
    )
    samples = settings.eval_samples_per_bucket
    body = f"""# SSM adapter ({mixer}) for natural-language {settings.task}

One {mixer} layer inserted after decoder layer {config.layer_index} of a frozen causal LM ({base}),
{branch}. Only the adapter was trained:
{ssm["trainable_parameters"]} trainable parameters, {ssm["steps"]} steps, {ssm["train_seconds"]:.0f} s on a shared
2-core CPU. Frozen mixer parameters: {config.frozen_mixer_parameters or "none"}. State updates: {settings.transitions_at}
(`transition_token_ids` in adapter_config.json). This folder holds no base weight.

Task: stories whose sentences are the transitions of the `{settings.task}` automaton, ending in a question answered
by one word (hf_ssm.data.nl_state_tracking). {_training_stories_description(settings)}, tested on longer
stories. Answer accuracy (%) by number of transitions, with the other methods of the
same run (if any):

{table}

Base: {json.dumps(base_info)}

## Use

```python
{load_base}
from hf_ssm.adapters import load_ssm_adapter

model = load_ssm_adapter(base, "<this folder>")
batch = tokenizer([story], return_tensors="pt", padding=True)  # story ends with "Answer:"
{read}
```

Mixer settings: `{json.dumps(mixer_settings)}`. Reproduce with
`python scripts/train_adapter.py {reproduce}` (see docs/adapter.md).

## Limitations

- Trained and tested only on the generated stories of this task (their sentence templates, names and
  vocabulary); other phrasings, languages and tasks are untested.
- The accuracies above come from {samples} fresh stories per bucket and one training seed; how often the same
  command succeeds across seeds is reported in the project's RESULTS.md, not here.
- {"The classifier answers only with the task's answer classes; the base model's own generations are unchanged." if classifier else "The answer is read from the LM head's logits of the answer words; other generations of the adapted model are not evaluated."}
- A research artefact of the hf_ssm package, not a product: no safety or bias evaluation was done.
"""
    return check_model_card(f"---\n{data.to_yaml()}\n---\n\n" + body)


def _card_adapter(settings: AdapterExperimentSettings, classifier: bool) -> tuple:
    """(config, the mixer's name, its settings, how the adapter answers) as the model card names them; what it names
    (mixer, layer, frozen parameters) does not depend on the transition token ids."""
    if settings.adapter_kind == "entity_tracking":  # no mixer: the tracker of hf_ssm.adapters.entity_tracking
        config = settings.entity_adapter_config("classifier" if classifier else "lm_head", 2)
        return config, "entity_tracking", config.entity_settings, _entity_description(config, classifier)
    config = settings.adapter_config_for_ids(None)
    branch = _branch_description(config, classifier, per_head=settings.classifier_per_head)
    return config, config.mixer, config.mixer_settings, branch


def _entity_description(config: SSMAdapterConfig, classifier: bool) -> str:
    """The model card's sentence on how the entity tracker (hf_ssm.adapters.entity_tracking) answers."""
    how = (
        "a tagger of the base's features finds names, objects, swaps and options; names and objects are matched by "
        "the base's own embeddings; one PD-SSM head per object slot tracks who holds it through the swaps' "
        "transpositions; each option is scored by the object the asked person holds"
    )
    if classifier:
        return f"as a side branch ({how}; the base's hidden states and logits are untouched)"
    where = "that layer" if config.write_layer_index is None else f"decoder layer {config.write_layer_index}"
    return f"adding W_out softmax(option scores) to the output of {where} ({how}; W_out zero-initialised)"


def _branch_description(config: SSMAdapterConfig, classifier: bool, per_head: bool) -> str:
    """How the adapter's output reaches the answer, as the model card's sentence says it (`per_head`: the
    classifier_per_head readout, which `config`, built without the classifier, does not carry)."""
    heads = "sum over heads h of log_softmax(W_h x_h + b_h), every head's own readout of its state x_h"
    if per_head and not classifier:
        where = (
            "that layer"
            if config.write_layer_index is None
            else f"decoder layer {config.write_layer_index} (where the LM head reads when it is the last)"
        )
        return (
            f"adding W_out softmax(v) to the output of {where}, where the vote v = {heads} (each head trained with its own "
            "cross-entropy, W_out with the LM head's loss; v is detached before W_out), W_out zero-initialised"
        )
    if per_head:
        return (
            f"as a side branch: logits = {heads} (each trained with its own cross-entropy; the base's hidden states "
            "and logits are untouched)"
        )
    if classifier:
        return (
            "as a side branch: logits = W_cls Mixer(Norm(h)) (its own classifier over the answer classes; the base's "
            "hidden states and logits are untouched)"
        )
    if config.write_layer_index is None:
        return "as a residual branch h <- h + W_out Mixer(Norm(h)), W_out zero-initialised"
    return (
        f"reading h_k there and adding W_out Mixer(Norm(h_k)) to the output of decoder layer "
        f"{config.write_layer_index} (where the LM head reads when it is the last), W_out zero-initialised"
    )

"""The adapter wing: the training side of the SSM adapter on a frozen causal LM (docs/design.md §10): the
experiment's settings and presets, the base and the methods built on it, scoring, the driver and its records. The
model side (config, layer, model, LoRA, bases) is the public package hf_ssm.adapters."""

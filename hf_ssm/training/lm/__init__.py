"""The causal-LM wing: pretraining and fine-tuning (full or LoRA) with Accelerate, their settings and run setup
(tokenizer, config, corpus blocks), and what a run writes (metrics, curves, samples, the model folder)."""

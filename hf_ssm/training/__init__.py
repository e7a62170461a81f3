"""Training helpers shared by the scripts: crash-safe checkpoints and the state-tracking loop."""

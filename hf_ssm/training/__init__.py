"""Training, in wings over a small shared core. The core: the loop every driver shares (loop.py: run, checkpoints
of the accelerator, progress bars, evaluation skeleton), crash-safe checkpoint folders (checkpointing.py), the
settings every wing shares (settings_base.py) and the names they had before (legacy_settings.py), the
command-line pieces (cli.py), optimisers and schedules (optimization.py), reports (reports.py: tables, plots, summary
files) and the model stack of the small classification drivers (stack.py). The wings: state_tracking/, adapter/,
lm/, timeseries/; a wing imports the core, never another wing."""

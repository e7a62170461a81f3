"""The time-series wing: classification of UEA / UCR datasets with a hybrid model (docs/design.md §6.7)."""

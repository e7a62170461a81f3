"""The state-tracking wing: training a hybrid model on a formal state-tracking task and measuring its length
generalisation (docs/design.md §8): settings, recipes, evaluation, the driver and what a run reports."""

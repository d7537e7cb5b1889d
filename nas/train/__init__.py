"""Training: the trial contract, the built-in trainer, datasets, augmentation, schedules, recipes, costs."""

"""The models trained here: settings, tokenizer, batches, architecture, loss, checkpoints, the
training loop and its records, the untrained twin, length generalization, comparison tables."""

"""The expected-map estimator behind the headline leakage: per-prompt statistics and their Grams,
the U-statistic ratio, its multiplier replicates, and the summary's shared cache."""

"""The expected-map estimator behind the headline leakage: per-prompt sufficient statistics and
their Grams (:mod:`.pairgrams`), the U-statistic ratio and its readings (:mod:`.expected`), the
multiplier replicates over prompts (:mod:`.replicates`), a store's statistics as numpy views
(:mod:`.storeview`) and the summary's shared cache of Grams and estimates (:mod:`.grams`)."""

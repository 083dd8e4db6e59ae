"""One (model, dataset)'s paper-2 summary, block by block: the headline reading (:mod:`.headline`),
the per-prompt reading (:mod:`.per_prompt`, with its permutation test :mod:`.permutation`), BOS
replacement (:mod:`.bos`), the positive control planted in the model (:mod:`.planted`), all merged
by :func:`causalpos.paper2.summary.assemble.leakage_summary`."""

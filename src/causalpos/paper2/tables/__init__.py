"""Paper 2's tables: the headline reading's frames (:mod:`.headline`), the per-prompt reading's
(:mod:`.per_prompt`), position 0's (:mod:`.position0`), every table across (model, dataset) pairs
(:mod:`.assemble`) and their Markdown digest (:mod:`.markdown`)."""

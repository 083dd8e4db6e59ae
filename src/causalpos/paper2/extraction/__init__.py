"""What paper 2 computes during extraction, per sequence, layer and head: the design of a fit on a
pair set (:mod:`.design`), ΔR² and its solver (:mod:`.metric`), the sums of a batch of maps
(:mod:`.mapsums`), the query windows' stacked designs (:mod:`.windows`) and the reducers that
stream them (:mod:`.reducers`)."""

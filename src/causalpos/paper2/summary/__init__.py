"""One (model, dataset)'s paper-2 summary, block by block, merged by
:func:`causalpos.paper2.summary.assemble.leakage_summary`."""

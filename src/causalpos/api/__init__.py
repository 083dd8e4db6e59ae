"""The library from a notebook: paper 1's index, paper 2's leakage and the captured scores of a
model already loaded, by the code the pipeline's rules run.

What you call (each resolves on first use, so ``import causalpos`` stays light):

- ``causalpos.tokenize_texts(tokenizer, texts, seq_len, ...)``: token sequences of your texts,
  position 0 as a dataset's (:func:`causalpos.sampling.tokenize_texts`);
- ``causalpos.capture(model, tokens, variants=("causal", "ring"), layers=None, ...)``: every
  layer's per-head pre-softmax scores, their mean map over the prompts and, when asked, every
  prompt's (:func:`causalpos.api.scores.capture`);
- ``causalpos.paper1.index(model, tokens, ...)``: paper 1's non-relativeness index per layer with
  its intervals (:func:`causalpos.api.paper1.paper1_index`);
- ``causalpos.paper2.leakage(model, tokens, variants=("causal", "ring"), ...)``: paper 2's
  headline leakage and its decomposition pooled, per layer and per layer kind, with intervals
  and the controls' verdicts, one tidy frame (:func:`causalpos.api.paper2.paper2_leakage`).

Each runs the rules' stage code (:func:`causalpos.stages.extract.extract_variants`,
:func:`causalpos.stages.extract.as_merged`, :func:`causalpos.stages.leakage.summarize_leakage`)
and table builders, so a number is the one the pipeline writes for the same model, prompts and
settings. The settings are the pipeline's frozen dataclasses, defaults the config schema's:
:class:`~causalpos.capture.settings.ExtractSettings`,
:class:`~causalpos.paper1.settings.IndexSettings`,
:class:`~causalpos.paper2.settings.LeakageSettings`,
:class:`~causalpos.paper2.settings.LeakageReducerSettings`.

No library module imports this package (the names above reach it by ``importlib`` at first use),
so no rule's code fingerprint includes it. Guide: ``docs/api.md``.
"""

#: The modules of the API reference (docs/api.md: ``python -m pdoc -d google -o docs/reference``
#: and these; tests/test_api.py builds it).
REFERENCE_MODULES = (
    "causalpos.api",
    "causalpos.sampling",
    "causalpos.capture.settings",
    "causalpos.paper1.settings",
    "causalpos.paper2.settings",
)

"""causalpos: where positional information comes from in decoder-only transformers.

The science of two studies, importable and unit-tested:

- Kim et al. (2025), *Behind RoPE: How Does Causal Mask Encode Positional Information?*
- Ruscio et al. (2026), *Where does Absolute Position come from in decoder-only Transformers?*

Modules depend downward only: ``theory`` <- ``simulate``; ``rope``; ``diagonal``;
``data``; ``models`` <- ``capture`` <- ``store``; ``training`` (beside ``models``); ``leakage``;
``stats`` (leaf); ``figures``; ``cli``.
"""

__version__ = "0.1.0"

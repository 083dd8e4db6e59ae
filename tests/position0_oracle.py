"""An oracle of position 0's residual stream for the tests: the reader of
:mod:`causalpos.capture.position0` run on its own, on a model in memory, outside extraction
(:func:`position0_states`, under a forward-pass condition :func:`condition_states`), and the value
vectors at key 0 of stored states (:func:`position0_values`). Left padding breaks the premise
(position 0 becomes a pad), so padded inputs are refused (:func:`check_unpadded`).
"""

from __future__ import annotations

import numpy as np
import torch

from causalpos.capture.position0 import Position0States, _values
from causalpos.models.variants import VARIANTS

#: Forward-pass conditions whose position-0 states can be read (capture's variant names;
#: scrambled RoPE changes position ids, which position 0 never sees through a causal mask).
POSITION0_CONDITIONS = tuple(v for v in VARIANTS if v != "scrambled_rope")


def check_unpadded(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    pad_token_id: int | None = None,
    bos_token_id: int | None = None,
) -> None:
    """Refuse inputs whose position 0 may not be the prompt's first token.

    Raises ``ValueError`` if ``attention_mask`` has any zero (padding) or if a row starts with the
    pad token (left padding). Right padding would be harmless for position 0 under a causal mask,
    but a mask with zeros is refused all the same: the trajectory needs N prompts of equal length.
    """
    if input_ids.ndim != 2:
        raise ValueError(f"input_ids must be (prompt, T), got shape {tuple(input_ids.shape)}")
    if attention_mask is not None and bool((attention_mask == 0).any()):
        rows = torch.nonzero((attention_mask == 0).any(dim=1)).flatten()[:5].tolist()
        raise ValueError(
            f"attention_mask has zeros (padding) in prompts {rows}: the position-0 trajectory needs "
            "prompts of equal length without padding (left padding moves a pad token to position 0). "
            "Cut every prompt to the same number of tokens and pass no attention mask."
        )
    if pad_token_id is not None and pad_token_id != bos_token_id:
        left = input_ids[:, 0] == pad_token_id
        if bool(left.any()):
            rows = torch.nonzero(left).flatten()[:5].tolist()
            raise ValueError(
                f"prompts {rows} start with the pad token id {pad_token_id} (left padding): position 0 "
                "must be the prompt's first token. Use unpadded prompts of equal length."
            )


@torch.no_grad()
def position0_states(
    model,
    input_ids: torch.Tensor | None = None,
    *,
    inputs_embeds: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    batch_size: int | None = None,
) -> np.ndarray:
    """Residual stream at position 0: the first block's input and every block's output.

    Args:
        model: a Hugging Face causal LM (decoder blocks at ``model.model.layers``).
        input_ids: ``(prompt, T)`` token ids, no padding (see :func:`check_unpadded`).
        inputs_embeds: ``(prompt, T, d)`` instead of ``input_ids`` (BOS replacement).
        attention_mask: refused if it has zeros; otherwise not passed on.
        batch_size: prompts per forward pass; None = all at once. Bitwise-equal position-0 states
            across prompts are guaranteed by the maths only up to the kernels: batches of different
            sizes may take different BLAS paths, so keep the default for exactness checks.

    Returns:
        ``(prompt, layer, dim)`` float64, layer 0 = embedding output, layer ℓ = after block ℓ
        (the last one before the final norm), read by :class:`Position0States`.
    """
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("pass exactly one of input_ids and inputs_embeds")
    cfg = model.config
    if input_ids is not None:
        check_unpadded(
            input_ids,
            attention_mask,
            getattr(cfg, "pad_token_id", None),
            getattr(cfg, "bos_token_id", None),
        )
        n = input_ids.shape[0]
    else:
        if inputs_embeds.ndim != 3:
            raise ValueError(
                f"inputs_embeds must be (prompt, T, d), got shape {tuple(inputs_embeds.shape)}"
            )
        check_unpadded(torch.zeros(inputs_embeds.shape[:2], dtype=torch.long), attention_mask)
        n = inputs_embeds.shape[0]
    bs = n if batch_size is None else int(batch_size)
    reader = Position0States()
    with reader.attached(model):
        for start in range(0, n, bs):
            sl = slice(start, start + bs)
            kw = (
                {"input_ids": input_ids[sl]}
                if input_ids is not None
                else {"inputs_embeds": inputs_embeds[sl]}
            )
            reader.begin_batch(np.arange(start, min(n, start + bs)))
            # logits_to_keep=1: the vocabulary projection of every position is not needed
            model(**kw, use_cache=False, logits_to_keep=1)
            reader.end_batch()
    return reader.result()["p0_state"].values.astype(np.float64)


@torch.no_grad()
def position0_values(model, states: np.ndarray) -> np.ndarray:
    """Value vectors at key 0 of every block: v_proj(input_layernorm(h_ℓ[0])).

    Args:
        model: Llama-family causal LM (``model.model.layers[ℓ].input_layernorm`` / ``.self_attn.v_proj``).
        states: ``(prompt, L+1, d)`` from :func:`position0_states` (entry ℓ is block ℓ's input).

    Returns:
        ``(prompt, layer, kv_head, head_dim)`` float64 (values carry no rotary embedding).
    """
    return _values(model, torch.as_tensor(np.asarray(states))).to(torch.float64).cpu().numpy()


@torch.no_grad()
def condition_states(
    model,
    input_ids: torch.Tensor,
    condition: str,
    *,
    seq_ids: np.ndarray | None = None,
    seed: int = 0,
    batch_size: int | None = None,
) -> np.ndarray:
    """:func:`position0_states` under a forward-pass condition (one of :data:`POSITION0_CONDITIONS`).

    ``bidirectional`` sets ``config.is_causal = False`` for the call; ``identity_rope`` replaces the
    rotation by the identity; ``bos_replace_*`` feeds :func:`causalpos.models.forward.
    bos_replaced_embeddings` (the same replacement, seeded by ``(seed, sequence id)``, as the
    extraction of that variant). The model is restored afterwards.
    """
    from causalpos.models.forward import bos_replaced_embeddings, model_side
    from causalpos.models.variants import parse_variant

    if condition not in POSITION0_CONDITIONS:
        raise ValueError(
            f"position-0 condition {condition!r} not supported; allowed: {list(POSITION0_CONDITIONS)}"
        )
    v = parse_variant(condition)
    seq_ids = np.arange(input_ids.shape[0]) if seq_ids is None else np.asarray(seq_ids)
    with model_side(model, v):
        if v.bos_replace is not None:
            embeds = bos_replaced_embeddings(
                model, input_ids, seq_ids, v.bos_replace, per_prompt=v.per_prompt, seed=seed
            )
            return position0_states(model, inputs_embeds=embeds, batch_size=batch_size)
        return position0_states(model, input_ids, batch_size=batch_size)

# ---
# jupyter:
#   jupytext:
#     formats: py:percent
# ---

# %% [markdown]
# # causalpos from a notebook
#
# Paper 1's non-relativeness index and paper 2's leakage of a model you have already loaded,
# computed by the code the pipeline's rules run (docs/api.md). Open it as a notebook with
# `jupytext --to notebook docs/examples/notebook_api.py`, or run it as a script. The model is
# `CAUSALPOS_EXAMPLE_MODEL` (a hub id or a local directory, default SmolLM2-135M; the default
# run prepares it offline in `resources/models/smollm2-135m`).

# %%
import os

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import causalpos
import causalpos.paper1
import causalpos.paper2
from causalpos.data import kjv_documents
from causalpos.paper2.settings import LeakageSettings

MODEL = os.environ.get("CAUSALPOS_EXAMPLE_MODEL", "HuggingFaceTB/SmolLM2-135M")
tokenizer = AutoTokenizer.from_pretrained(MODEL)
model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32).eval()

# %% [markdown]
# Prompts: chunks of 64 tokens of the book of Ruth (the KJV ships with causalpos), each
# starting with the tokenizer's BOS at position 0 (`prepend_bos`, as a dataset of the pipeline
# sets it). Chunks at random-ish offsets of the text are what paper 2's negative controls need.

# %%
texts = [doc.text for doc in kjv_documents("book", ["Ruth"])]
tokens = causalpos.tokenize_texts(
    tokenizer, texts, seq_len=64, mode="chunks", prepend_bos=True, n_sequences=24
)
tokens

# %% [markdown]
# Every layer's pre-softmax scores under the model as trained (`causal`) and on the ring (no
# mask, no edge), averaged over the prompts: `score_mean` (variant, layer, head, query, key),
# NaN where the mask hides a key. `per_sequence=True` keeps every prompt's maps too.

# %%
scores = causalpos.capture(model, tokens, variants=("causal", "ring"), layers=[0, -1])
head_avg = scores["score_mean"].mean("head")
head_avg.sel(variant="causal").isel(layer=0)

# %% [markdown]
# Paper 1: the non-relativeness index of each layer's head-averaged map, with its bootstrap
# interval over groups of prompts, and the scale-free non-relative share.

# %%
index = causalpos.paper1.index(model, tokens)
index[["layer", "layer_kind", "index", "ci_lo", "ci_hi", "share", "share_lo", "share_hi"]]

# %% [markdown]
# Paper 2: the headline leakage of each run, its decomposition into a causal-mask and a
# residual-stream part (the ring), and a negative control (`identity_rope+ring`: no position at
# all). The settings are the pipeline's (`LeakageSettings()`); fewer replicates here for speed.

# %%
leak = causalpos.paper2.leakage(
    model,
    tokens,
    variants=("causal", "ring", "identity_rope+ring"),
    settings=LeakageSettings(n_boot=400, n_perm=100),
)
headline = leak.query("part == 'leakage' and scope == 'model' and window == 'all'")
headline[["run", "target", "estimate", "lo", "hi", "verdict"]]

# %%
parts = ["total", "residual_stream", "causal_mask", "share_causal_mask"]
by_layer = leak.query(
    "part == 'components' and scope == 'layer' and landmark == 'modelled' "
    "and run == 'rope' and quantity in @parts"
)
by_layer.pivot(index="layer", columns="quantity", values="estimate")[parts]

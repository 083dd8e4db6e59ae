"""Coverage of paper 2's headline interval on dependent text with a fixed BOS.

    nice -n 19 python benchmarks/coverage_dependent.py [--sets 500] [--n-boot 2000]
        [--n 16 32] [--k-sd 0 3] [--worlds iid sticky-additive sticky sticky-bos]

Prints Markdown: the true ρ of a model without positional input per key-0 handling (closed
form), then per world, n and planted size the coverage of the true ρ by the headline's 95 %
interval. A simulation that shares no code with the pipeline but the estimator it measures:
maps y_p over the lower triangle (rows 1..T − 1, keys 0..i, T = 16) of three heads, each

    y_ij = τ_p (rel(i − j) + u[x_i] + k[x_j] + W[x_i, x_j] + r_ij + a q_i) + skewed noise,

tokens x_1..x_{T−1} from a sticky Markov chain with Zipf marginals (stay with probability s,
else a fresh Zipf draw) after a fixed BOS x_0: ``start`` "bos" draws x_1 from another Zipf law
(the chain's transition out of BOS, so the law of x_i moves with i: s^(i−1) ν + (1 − s^(i−1)) π),
"stationary" from π. u[x_i] is the query token's effect on every cell of its row (row-shared
content), k[x_j] the key token's, W a low-rank interaction (scale ``inter``) with a self-match
bonus (``match``), W[x_i, BOS] the key-0 column's content. r is a non-additive map orthogonal to
every fit below; q_i = log i the planted absolute query effect (two of the three heads), its
amplitude a set so that the pooled numerator exceeds its value at a = 0 by k null SDs of N̂
(the SD over the cell's prompt sets at a = 0); τ_p a prompt's scale (log-normal), the noise a
centred Gamma(2).

**Truth.** The expected map μ is exact (the chain's one- and two-position laws in closed form,
checked against simulated means by the test), and ρ = Σ_h ‖P_Δ μ_h‖² / Σ_h ‖C μ_h‖² from dense
projectors (offsets and a key-0 handling; + query rows), as the headline defines it. Key-0
handlings: ``landmark`` (one key-0 column in both fits: the headline's, ``landmark=True`` of
:func:`causalpos.paper2.extraction.design.build_design`), ``key0_rows`` (key 0 modelled per
query row: the key-0 pairs fitted exactly in both models; no library reading does this) and
``counted`` (nothing for key 0: the library's ``landmark=False``). With dependent tokens and a
token-token interaction a model without positional input has ρ > 0 under ``landmark``: at
offset d the key-0 pair's key is the fixed BOS while the other pairs' keys depend on their
queries' tokens (E W[x_i, x_{i−d}] decays with d), so key 0's excess over its offset's level
moves with i, which one column cannot absorb (``key0_rows`` absorbs it; without the
interaction the key-0 level is constant and ρ = 0). Where the text's law moves with the
distance from BOS ("bos") the row-shared content is a query effect of μ itself, under every
handling.

**Readings.** Per prompt set: ρ̂ = Σ_h N̂ / Σ_h D̂ and its 95 % interval from
:func:`causalpos.paper2.estimator.expected.estimate` (the headline's call: calibrated multiplier
replicates of :mod:`causalpos.paper2.estimator.replicates` inverted by
:func:`causalpos.paper2.inference.calibrated_ratio`, the residual part of D̂ held fixed; one prompt
set per layer, whose reading equals the pooled one of that set alone — the test checks it),
Rademacher multipliers fresh for each block of :data:`BLOCK` sets, and the one-sided sign-flip
p of N = 0 from the same draws. Per cell: the true ρ, its coverage with the binomial SE
√(c(1 − c)/sets), the misses below (hi < ρ) and above (lo > ρ), the rate of p ≤ 0.05 (the
test's size where ρ = 0), the mean bias of ρ̂ (relative to ρ where ρ > 0) and SD(ρ̂). The
cells of one world and n share their prompt sets (the planted effect added to the same tokens
and noise). The worlds: :data:`WORLDS`.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import time

import numpy as np

from causalpos.paper2 import inference as I
from causalpos.paper2.estimator import expected as X
from causalpos.paper2.estimator import replicates as RP


@dataclasses.dataclass(frozen=True)
class World:
    """The simulated text and model (module docstring)."""

    T: int = 16
    V: int = 24
    heads: int = 3
    zipf: float = 1.1
    stick: float = 0.6
    start: str = "bos"
    inter: float = 0.7
    match: float = 1.5
    noise: float = 0.5
    scale_sd: float = 0.15
    seed: int = 11


def _proj(a: np.ndarray) -> np.ndarray:
    """Orthogonal projector on the column span of ``a`` (eigendecomposition, explicit rank cut)."""
    w, v = np.linalg.eigh(a.T @ a)
    keep = w > 1e-10 * w[-1]
    u = a @ v[:, keep] / np.sqrt(w[keep])
    return u @ u.T


def pairs(T: int) -> tuple[np.ndarray, np.ndarray]:
    """The measured pairs: rows 1..T − 1, keys 0..i (the headline's lower triangle)."""
    i, j = np.nonzero(np.tril(np.ones((T, T), dtype=bool)))
    keep = i >= 1
    return i[keep], j[keep]


@functools.lru_cache(maxsize=8)
def projectors(T: int, handling: str = "landmark") -> dict[str, np.ndarray]:
    """P_Δ = P_F − P_B, C and C P_F on the pairs for a key-0 ``handling``."""
    i, j = pairs(T)
    d = i.size
    cols = [np.eye(T)[i - j]]
    if handling == "landmark":
        cols.append((j == 0)[:, None] * 1.0)
    elif handling == "key0_rows":
        cols.append(np.eye(T)[i] * (j == 0)[:, None])
    elif handling != "counted":
        raise ValueError(f"handling must be landmark, key0_rows or counted, got {handling!r}")
    xb = np.hstack(cols)
    pf = _proj(np.hstack([xb, np.eye(T)[i]]))
    c = np.eye(d) - 1.0 / d
    return {"pd": pf - _proj(xb), "c": c, "cpf": c @ pf}


def zipf(v: int, s: float) -> np.ndarray:
    p = 1.0 / np.arange(1, v + 1) ** s
    return p / p.sum()


@functools.lru_cache(maxsize=8)
def tables(w: World) -> dict[str, np.ndarray]:
    """Per head: offset profile, token effects, interaction (BOS = token V), planted direction,
    the non-additive residual, and the chain's laws."""
    rng = np.random.default_rng(w.seed)
    T, V, H = w.T, w.V, w.heads
    d = np.arange(T)
    rel = rng.uniform(0.5, 1.5, (H, 1)) * np.cos(rng.uniform(0.3, 1.0, (H, 1)) * d)
    rel += rng.uniform(0.5, 2.0, (H, 1)) * np.exp(-d / 3.0)
    u = rng.normal(size=(H, V + 1))  # query-token effect, row-shared
    k = 0.7 * rng.normal(size=(H, V + 1))  # key-token effect
    k[:, V] = 3.0  # the BOS key: a sink
    f = rng.normal(size=(H, V + 1, 2))
    g = rng.normal(size=(H, V + 1, 2))
    inter = w.inter * f @ np.swapaxes(g, 1, 2) + w.match * np.eye(V + 1)
    inter[:, :, V] = 1.2 * rng.normal(size=(H, V + 1))  # the key-0 column's content
    i, j = pairs(T)
    r = 0.3 * np.sin(0.9 * i + rng.uniform(0, 3, (H, 1))) * np.cos(0.7 * j)
    big = np.hstack([np.eye(T)[i - j], np.eye(T)[i] * (j == 0)[:, None], np.eye(T)[i]])
    r = r - r @ _proj(big)  # orthogonal to every fit: no query effect under any handling
    pi = zipf(V, w.zipf)
    nu = pi[rng.permutation(V)] if w.start == "bos" else pi
    q = np.log(np.maximum(i, 1.0))[None] * np.array([0.0, 1.0, 0.6])[:H, None]
    return {"rel": rel, "u": u, "k": k, "w": inter, "r": r, "pi": pi, "nu": nu, "q": q}


def laws(w: World) -> tuple[np.ndarray, np.ndarray]:
    """law[i] (T, V): the law of x_i (row 0 unused); joint[i, j] (T, T, V, V): of (x_i, x_j)."""
    t = tables(w)
    pi, nu, s = t["pi"], t["nu"], w.stick
    law = np.zeros((w.T, w.V))
    for i in range(1, w.T):
        law[i] = s ** (i - 1) * nu + (1 - s ** (i - 1)) * pi
    joint = np.zeros((w.T, w.T, w.V, w.V))
    for i in range(1, w.T):
        for j in range(1, i + 1):
            stay = s ** (i - j)  # P(x_i = x_j | x_j) beyond a fresh draw from π
            joint[i, j] = (1 - stay) * pi[:, None] * law[j][None, :] + stay * np.diag(law[j])
    return law, joint


@functools.lru_cache(maxsize=8)
def expected_map(w: World) -> np.ndarray:
    """μ at a = 0 (heads, pairs), exact (E τ_p times the content's expectation)."""
    t = tables(w)
    law, joint = laws(w)
    i, j = pairs(w.T)
    V = w.V
    mu = np.empty((w.heads, i.size))
    for h in range(w.heads):
        for n, (a, b) in enumerate(zip(i, j, strict=True)):
            row = law[a] @ t["u"][h, :V]
            if b == 0:
                val = t["k"][h, V] + law[a] @ t["w"][h, :V, V]
            else:
                pj = joint[a, b]  # (x_i, x_j)
                val = law[b] @ t["k"][h, :V] + (pj * t["w"][h, :V, :V]).sum()
            mu[h, n] = t["rel"][h, a - b] + row + val + t["r"][h, n]
    return mu * np.exp(w.scale_sd**2 / 2)


def truth(w: World, amp: float, handling: str = "landmark") -> tuple[float, float]:
    """(Σ_h ‖P_Δ μ_h‖², Σ_h ‖C μ_h‖²) per pair of prompts, at amplitude ``amp``."""
    p = projectors(w.T, handling)
    mu = expected_map(w) + amp * np.exp(w.scale_sd**2 / 2) * tables(w)["q"]
    return float(np.einsum("hx,xy,hy->", mu, p["pd"], mu)), float(
        np.einsum("hx,xy,hy->", mu, p["c"], mu)
    )


def sample_tokens(w: World, rng: np.random.Generator, shape: tuple) -> np.ndarray:
    """Token sequences (..., T): x_0 = BOS (V), then the sticky chain."""
    t = tables(w)
    x = np.empty(shape + (w.T,), dtype=np.int64)
    x[..., 0] = w.V
    x[..., 1] = rng.choice(w.V, size=shape, p=t["nu"])
    for pos in range(2, w.T):
        fresh = rng.choice(w.V, size=shape, p=t["pi"])
        stay = rng.random(shape) < w.stick
        x[..., pos] = np.where(stay, x[..., pos - 1], fresh)
    return x


def sample_maps(w: World, rng: np.random.Generator, sets: int, n: int, amp: float) -> np.ndarray:
    """Maps (sets, n, heads, pairs)."""
    t = tables(w)
    i, j = pairs(w.T)
    x = sample_tokens(w, rng, (sets, n))
    xi, xj = x[..., i], x[..., j]  # (sets, n, pairs)
    hh = np.arange(w.heads)[:, None]
    sig = (
        t["rel"][hh, i - j]
        + t["u"][hh, xi[..., None, :]]
        + t["k"][hh, xj[..., None, :]]
        + t["w"][hh, xi[..., None, :], xj[..., None, :]]
        + t["r"]
        + amp * t["q"]
    )
    tau = np.exp(w.scale_sd * rng.normal(size=(sets, n, 1, 1)))
    noise = (rng.gamma(2.0, 1.0, size=sig.shape) - 2.0) / np.sqrt(2.0)
    return tau * sig + w.noise * noise


def grams_for(y: np.ndarray, T: int, handling: str = "landmark") -> dict[str, np.ndarray]:
    """The estimator's Grams of maps y (sets, n, heads, pairs) in the library's layout, one prompt
    set per *layer* (sets, heads, ...): ``num`` y_pᵀP_Δy_q and ``low`` y_pᵀ C P_F y_q (n, n),
    ``sst`` ‖C y_p‖² (n), ``sst_sum`` ‖C Σ_p y_p‖² (:mod:`causalpos.paper2.estimator.expected`)."""
    p = projectors(T, handling)
    yh = np.moveaxis(y, 2, 1)  # (sets, heads, n, pairs)
    yt = np.swapaxes(yh, -1, -2)
    yc = yh @ p["c"]
    s = yc.sum(2)
    return {
        "num": (yh @ p["pd"]) @ yt,
        "low": (yh @ p["cpf"]) @ yt,
        "sst": (yc * yc).sum(-1),
        "sst_sum": (s * s).sum(-1),
    }


def intervals(g: dict[str, np.ndarray], xi: np.ndarray) -> dict[str, np.ndarray]:
    """Per prompt set of the Grams ``g`` (one set per layer, :func:`grams_for`): ρ̂ = Σ_h N̂ /
    Σ_h D̂ and its 95 % interval (lo, hi), from :func:`causalpos.paper2.estimator.expected.estimate`
    under the multipliers ``xi`` (B, n) — the function the headline calls, each layer's reading
    the same calibrated ratio as its pooled one — and the one-sided sign-flip p of N = 0 from the
    same draws (:func:`causalpos.paper2.inference.sign_flip_pvalue`)."""
    n = xi.shape[1]
    r = X.estimate(g, xi, level=LEVEL, lean=True, heads=False)
    p = I.sign_flip_pvalue(r["layer_num"] * n * (n - 1.0), r["num_parts_layer"]["null"])
    return {"rho": r["layer"], "lo": r["layer_lo"], "hi": r["layer_hi"], "p": p}


#: The headline's interval level (the default config's ``level``).
LEVEL = 0.95
#: Prompt sets per block: one simulation draw and one set of multipliers (seeded per block).
BLOCK = 100


@dataclasses.dataclass(frozen=True)
class Setting:
    """One cell of the table: the world, n prompts, the planted size in null SDs of N̂, the key-0
    handling the fit uses, the prompt sets, the multipliers per set, the seed."""

    world: World = World()
    n: int = 32
    k_sd: float = 0.0
    handling: str = "landmark"
    sets: int = 500
    n_boot: int = 2000
    seed: int = 0


@functools.lru_cache(maxsize=64)
def readings(s: Setting, amp: float) -> dict[str, np.ndarray]:
    """Per prompt set (sets,): ρ̂, lo, hi, p (:func:`intervals`), and of the numerator alone N̂
    (``num``), its interval (``num_lo``, ``num_hi``), α̂ and Var*(N*) at amplitude ``amp``, in blocks of :data:`BLOCK` sets (one generator seeded by ``s.seed``: the cells of one
    world and n at different amplitudes share their tokens and noise; fresh multipliers a
    block)."""
    rng = np.random.default_rng(s.seed)
    parts = []
    for b0 in range(0, s.sets, BLOCK):
        y = sample_maps(s.world, rng, min(BLOCK, s.sets - b0), s.n, amp)
        g = grams_for(y, s.world.T, s.handling)
        xi = RP.rademacher(s.n, s.n_boot, seed=10_000 * s.seed + b0 + 1)
        r = intervals(g, xi)
        # the numerator alone (N = Σ_h N_h): its interval, α̂ and Var*(N*) (the variance model)
        u = RP.u_replicates(g["num"].sum(1), xi)
        r["num"], r["alpha"], r["var"] = u["est"], u["alpha"], u["var"]
        r["num_lo"], r["num_hi"] = I.bounds(I.inverted(u, s.n, LEVEL), LEVEL)
        parts.append(r)
    return {k: np.concatenate([x[k] for x in parts]) for k in parts[0]}


def amplitude(s: Setting) -> float:
    """The planted amplitude a ≥ 0 whose pooled N = n(n − 1) Σ_h ‖P_Δ μ_h‖² exceeds its value at
    a = 0 by k_sd null SDs of N̂ (the SD over the setting's prompt sets at a = 0)."""
    if s.k_sd == 0:
        return 0.0
    sd = float(readings(dataclasses.replace(s, k_sd=0.0), 0.0)["num"].std())
    p = projectors(s.world.T, s.handling)["pd"]
    mu0 = expected_map(s.world)
    q = np.exp(s.world.scale_sd**2 / 2) * tables(s.world)["q"]
    a2 = float(np.einsum("hx,xy,hy->", q, p, q))
    a1 = 2.0 * float(np.einsum("hx,xy,hy->", mu0, p, q))
    # a2 a² + a1 a = k_sd · SD / (n(n − 1))
    rhs = s.k_sd * sd / (s.n * (s.n - 1))
    return float((-a1 + np.sqrt(a1 * a1 + 4.0 * a2 * rhs)) / (2.0 * a2))


def measure(s: Setting) -> dict[str, float]:
    """Coverage of the true ρ (closed form, :func:`truth`) by the 95 % interval with its binomial
    SE, misses below (hi < ρ) and above (lo > ρ), the rejection rate of the sign-flip test at
    α = 0.05, the bias of ρ̂ (mean of ρ̂ − ρ, relative to ρ where ρ > 0) and SD(ρ̂) over the
    setting's prompt sets; of the numerator alone (the diagnosis of a miss): its interval's misses
    below and above N = n(n − 1) Σ_h ‖P_Δ μ_h‖², the mean replicate variance over Var N̂, the
    correlation of N̂ with α̂ (the variance model's slope) and the skewness of N̂."""
    amp = amplitude(s)
    r = readings(s, amp)
    num, den = truth(s.world, amp, s.handling)
    rho = num / den
    below, above = float((r["hi"] < rho).mean()), float((r["lo"] > rho).mean())
    cov = 1.0 - below - above
    err = r["rho"] - rho
    rel = rho > 1e-9  # a ρ of 0 up to the projectors' rounding: the bias in ρ's units
    n_true = num * s.n * (s.n - 1)
    d = r["num"] - r["num"].mean()
    return {
        "rho": rho,
        "num_below": float((r["num_hi"] < n_true).mean()),
        "num_above": float((r["num_lo"] > n_true).mean()),
        "var_ratio": float(r["var"].mean() / r["num"].var()),
        "corr_alpha": float(np.corrcoef(r["num"], r["alpha"])[0, 1]),
        "skew": float((d**3).mean() / r["num"].std() ** 3),
        "coverage": cov,
        "se": float(np.sqrt(cov * (1.0 - cov) / s.sets)),
        "below": below,
        "above": above,
        "reject": float((r["p"] <= 0.05).mean()),
        "bias_mean": float(err.mean() / rho) if rel else float(err.mean()),
        "sd": float(r["rho"].std()),
    }


def key0_bias(world: World) -> dict[str, float]:
    """The true ρ at a = 0 (no planted effect: a model without positional input on the world's
    text) under each key-0 handling, from the closed form."""
    out = {}
    for h in HANDLINGS:
        num, den = truth(world, 0.0, h)
        out[h] = num / den
    return out


#: The key-0 handlings of :func:`projectors`: the headline's first.
HANDLINGS = ("landmark", "key0_rows", "counted")


def key0_table(sticks=(0.0, 0.3, 0.6, 0.9)) -> list[str]:
    """Markdown rows: the true ρ at a = 0 per start, stickiness and key-0 handling."""
    rows = ["| start | stick | " + " | ".join(HANDLINGS) + " |", "|---|---:|" + "---:|" * 3]
    for start in ("stationary", "bos"):
        for st in sticks:
            b = key0_bias(World(start=start, stick=st))
            rows.append(
                f"| {start} | {st:g} | " + " | ".join(f"{b[h]:.5f}" for h in HANDLINGS) + " |"
            )
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", type=int, default=500)
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--n", type=int, nargs="+", default=[16, 32])
    ap.add_argument("--k-sd", type=float, nargs="+", default=[0.0, 3.0])
    ap.add_argument("--worlds", nargs="+", default=list(WORLDS), choices=list(WORLDS))
    ap.add_argument("--no-t", action="store_true", help="diagnostic: t_{n-1}/z factor set to 1")
    a = ap.parse_args(argv)
    if a.no_t:  # not the library's interval: the share of the t factor in a cell's coverage
        I._t_factor = lambda n, level: 1.0
        print("DIAGNOSTIC: the t_{n-1}/z factor of inference.inverted set to 1\n")
    print(f"{a.sets} prompt sets a cell, {a.n_boot} multipliers a set, level {LEVEL}\n")
    print("True ρ at a = 0 (closed form) by key-0 handling:\n")
    print("\n".join(key0_table()) + "\n")
    print("| world | handling | n | a (SD) | true ρ | coverage ± SE | below | above | p ≤ 0.05 "
          "| bias of ρ̂ | SD(ρ̂) | CPU s |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    cells = []
    for name in a.worlds:
        world, handling = WORLDS[name]
        for n in a.n:
            for k in a.k_sd:
                t0 = time.process_time()
                m = measure(Setting(world, n, k, handling, a.sets, a.n_boot))
                cells.append((name, n, k, m))
                bias = f"{m['bias_mean']:+.1%}" if m["rho"] > 1e-9 else f"{m['bias_mean']:+.5f}"
                print(f"| {name} | {handling} | {n} | {k:g} | {m['rho']:.5f} | "
                      f"{m['coverage']:.1%} ± {m['se']:.1%} | {m['below']:.1%} | {m['above']:.1%} "
                      f"| {m['reject']:.1%} | {bias} | {m['sd']:.5f} "
                      f"| {time.process_time() - t0:.0f} |", flush=True)  # fmt: skip

    print("\nThe numerator N alone (its interval; α̂ the variance model's slope):\n")
    print("| world | n | a (SD) | N: below | N: above | mean Var*/Var N̂ | corr(N̂, α̂) | skew N̂ |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, n, k, m in cells:
        print(f"| {name} | {n} | {k:g} | {m['num_below']:.1%} | {m['num_above']:.1%} | "
              f"{m['var_ratio']:.2f} | {m['corr_alpha']:+.2f} | {m['skew']:+.2f} |")  # fmt: skip


#: The worlds of the table: (world, key-0 handling of the fit), all with a fixed BOS at key 0.
WORLDS = {
    # iid Zipf tokens (no dependence): ρ = 0 at a = 0 under the landmark
    "iid": (World(start="stationary", stick=0.0), "landmark"),
    # sticky tokens, stationary from position 1, content additive in the tokens (no token-token
    # interaction): the key-0 column's level is constant, ρ = 0 at a = 0 under the landmark
    "sticky-additive": (World(start="stationary", inter=0.0, match=0.0), "landmark"),
    # sticky tokens, stationary, with the interaction: the landmark's key-0 bias, ρ > 0 at a = 0
    "sticky": (World(start="stationary"), "landmark"),
    # sticky tokens whose law moves with the distance from BOS: ρ > 0 at a = 0 under any handling
    "sticky-bos": (World(start="bos"), "landmark"),
}


if __name__ == "__main__":
    main()

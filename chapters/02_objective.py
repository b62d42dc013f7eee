# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# (ch02)=
# # The objective: ratio, clip, KL, and no critic
#
# {doc}`01_two_plus_three_times_four` turned a group of rewards into advantages: a
# number per completion that says "better than the group" or "worse than the group".
# This chapter turns advantages into a *direction for the weights*. It builds the GRPO
# objective of DeepSeekMath {cite}`shao2024deepseekmath` (eq. 3) piece by piece, each
# piece a function of `grpo_lib.objective`, then assembles it on a toy batch and checks
# it against the trainer's loss.
#
# $$
# \mathcal J_{\mathrm{GRPO}}(\theta) = \mathbb E\Bigg[\frac1G\sum_{i=1}^G\frac1{|o_i|}
# \sum_{t=1}^{|o_i|}\Big\{\min\big[\rho_{i,t}\hat A_{i,t},\;
# \mathrm{clip}(\rho_{i,t}, 1-\varepsilon, 1+\varepsilon)\hat A_{i,t}\big]
# - \beta\,\mathbb D_{\mathrm{KL}}\big[\pi_\theta\|\pi_{\mathrm{ref}}\big]\Big\}\Bigg],
# \qquad
# \rho_{i,t} = \frac{\pi_\theta(o_{i,t}\mid q, o_{i,<t})}
#                   {\pi_{\theta_{\mathrm{old}}}(o_{i,t}\mid q, o_{i,<t})}
# $$
#
# The symbols are the book's throughout: $q$ is the prompt, $o_i$ the $i$-th of the
# $G$ completions, $\hat A_{i,t}$ its advantage, $\varepsilon$ the clip range and
# $\beta$ the weight of the penalty (the {ref}`notation` page lists them all, with their
# names in the code). Four ideas live in this line: the **policy ratio** $\rho$ (how
# much more or less likely the current policy makes a sampled token than the policy
# that sampled it), the **clip** and the **min** (PPO's trust region
# {cite}`schulman2017ppo`), the **KL penalty** to a frozen reference model, and what is
# *missing*: PPO's value network.

# %%
# NBVAL_IGNORE_OUTPUT
from grpo_lib.display import print_environment

print_environment()

# %%
import math

import matplotlib.pyplot as plt
import pandas as pd
import torch

from grpo_lib.advantages import group_advantages
from grpo_lib.display import say, show_source
from grpo_lib.objective import (clipped_surrogate, clipped_tokens, kl_estimate,
                                probability_ratio)
from grpo_lib.policy_gradient import (exact_gradient, expected_reward, grad_log_prob,
                                      score_function_gradient)
from grpo_lib.profiles import profile

P = profile()
pd.set_option("display.precision", 4)
torch.set_printoptions(precision=4, sci_mode=False)

# %% [markdown]
# (ch02-policy-gradient)=
# ## Where the gradient comes from
#
# A language model is a {term}`policy`: given a prompt $q$ it puts a probability
# $\pi_\theta(o \mid q)$ on every completion $o$. We want the weights $\theta$ that
# maximise the expected reward
# $\mathcal J(\theta) = \mathbb E_{o\sim\pi_\theta}[r(o)]$.
# The completions are sampled, and a sample has no gradient, so the gradient is
# rewritten as an expectation that samples can estimate. This is the log-derivative
# trick, $\nabla\pi = \pi\,\nabla\log\pi$:
#
# $$
# \nabla_\theta \mathcal J = \sum_o r(o)\,\nabla_\theta \pi_\theta(o)
# = \sum_o \pi_\theta(o)\, r(o)\,\nabla_\theta\log\pi_\theta(o)
# = \mathbb E_{o\sim\pi_\theta}\big[r(o)\,\nabla_\theta\log\pi_\theta(o)\big].
# $$
#
# Sample completions, weight the gradient of each one's log-probability by its reward,
# and average. That is REINFORCE {cite}`williams1992reinforce`. For a completion of
# several tokens, $\log\pi_\theta(o) = \sum_t \log\pi_\theta(o_t \mid q, o_{<t})$, so
# the score $\nabla\log\pi_\theta(o)$ is a sum over its tokens.
#
# A policy over four "answers" is enough to check every step, because its exact
# gradient is a sum of four terms. With $\pi_\theta = \mathrm{softmax}(\theta)$ the
# score of action $a$ is $e_a - \pi_\theta$ (`grpo_lib.policy_gradient`):

# %%
show_source(grad_log_prob, docstring=False)
show_source(score_function_gradient, docstring=False)

# %%
# NBVAL_CHECK_OUTPUT
theta = torch.tensor([0.5, -1.0, 0.0, 1.0], dtype=torch.float64)  # [K] logits
r = torch.tensor([1.0, 0.0, 0.0, 0.5], dtype=torch.float64)  # [K] reward per answer
pi = torch.softmax(theta, -1)
exact = exact_gradient(theta, r)  # autograd through sum_a pi(a) r(a)
print("pi              :", pi.numpy().round(4))
print("J = sum pi r    :", round(expected_reward(theta, r).item(), 4))
print("exact gradient  :", exact.numpy().round(4))


def draw(logits, n, seed):
    """n actions from softmax(logits), [n]."""
    gen = torch.Generator().manual_seed(seed)
    return torch.multinomial(torch.softmax(logits, -1), n, replacement=True,
                             generator=gen)


for n in (10, 1_000, 100_000):
    estimate = score_function_gradient(theta, draw(theta, n, seed=0), r).mean(0)
    err = (estimate - exact).abs().max().item()
    print(f"REINFORCE, {n:>7} samples: {estimate.numpy().round(4)}  "
          f"(largest error {err:.4f})")

# %% [markdown]
# The estimate approaches the exact gradient as samples accumulate; its error shrinks
# like $1/\sqrt N$. How fast it shrinks depends on the variance of one sample's
# estimate, and that is what a **baseline** reduces.
#
# ### A baseline changes the variance, not the mean
#
# Subtract any number $b$ that does not depend on the sampled action from the reward.
# The mean does not change, because
# $\mathbb E[b\,\nabla\log\pi_\theta] = b\sum_o\nabla\pi_\theta(o) = b\,\nabla 1 = 0$.
# The variance does change. Measure it on 100,000 draws, for no baseline, for the
# expected reward $\mathcal J$ (close to the best constant), and for a bad constant.
# Then use the mean of a group of $G = 8$ draws, as GRPO's {term}`advantage` does, and
# the mean of the *other* seven (leave-one-out):

# %%
# NBVAL_CHECK_OUTPUT
N, G = 100_000, 8
acts = draw(theta, N, seed=1)  # [N], groups of G consecutive draws
group_r = r[acts].view(-1, G)  # [N/G, G]
group_mean = group_r.mean(1, keepdim=True).expand(-1, G).reshape(-1)  # [N]
loo_mean = ((group_r.sum(1, keepdim=True) - group_r) / (G - 1)).reshape(-1)  # [N]
J = expected_reward(theta, r).item()
rows = []
BASELINES = [("none", 0.0), ("J (expected reward)", J), ("10 (a bad constant)", 10.0),
             ("group mean (GRPO)", group_mean), ("mean of the other 7", loo_mean)]
for name, b in BASELINES:
    g = score_function_gradient(theta, acts, r, baseline=b)  # [N, K]
    rows.append({"baseline": name,
                 "mean / exact": (g.mean(0) @ exact / (exact @ exact)).item(),
                 "variance of one sample": g.var(0).sum().item()})
baselines = pd.DataFrame(rows).set_index("baseline")
print(baselines.round(3).to_string())

# %% [markdown]
# `mean / exact` projects the averaged estimate on the exact gradient: 1 means the
# right mean. Every constant leaves the mean where it was, up to sampling noise. A good
# constant cuts the variance and a bad one multiplies it.
#
# The group mean needs no knowledge of $\mathcal J$, and its variance even comes out
# below that of the baseline $\mathcal J$. That is not a better baseline at work. The
# group mean contains the sample's own reward: with $\bar r_{-i}$ the mean of the other
# $G - 1$ rewards of the group,
#
# $$
# r_i - \bar r = \Big(1 - \frac1G\Big)\,(r_i - \bar r_{-i}),
# $$
#
# so each sample's estimate with the group mean is exactly $1 - 1/G$ times its estimate
# with the leave-one-out mean. The mean shrinks by that factor (the group mean's
# `mean / exact`) and the variance by its square: the group mean is biased by the
# factor $1 - 1/G$, and its lower variance is that same shrink. Rescaled by
# $G/(G - 1)$ it is exactly the leave-one-out estimate, no better than it; and the
# leave-one-out variance sits a little above that of the baseline $\mathcal J$, because
# the other $G - 1$ rewards estimate $\mathcal J$ with noise. The leave-one-out mean is
# exactly unbiased. A factor that is the same for every sample only rescales the step,
# which the learning rate and Adam's normalisation absorb, so GRPO keeps the simpler
# group mean.
#
# ### Samples from an older policy: the ratio
#
# A trainer that takes $\mu > 1$ steps on one batch uses samples drawn by the
# {term}`old policy` $\pi_{\theta_{\mathrm{old}}}$ to estimate the gradient at
# $\theta$. Importance sampling corrects the mismatch with the weight
# $\pi_\theta(o)/\pi_{\theta_{\mathrm{old}}}(o)$, the {term}`probability ratio`
# $\rho$:
#
# $$
# \nabla_\theta \mathcal J = \mathbb E_{o\sim\pi_{\theta_{\mathrm{old}}}}\big[\rho(o)\,
# \hat A(o)\,\nabla_\theta\log\pi_\theta(o)\big]
# = \mathbb E_{o\sim\pi_{\theta_{\mathrm{old}}}}\big[\hat A(o)\,\nabla_\theta
# \rho(o)\big],
# $$
#
# because $\nabla\rho = \rho\,\nabla\log\pi_\theta$. So the
# {term}`surrogate <Surrogate objective>` $\rho\,\hat A$ that PPO and GRPO maximise has
# the policy gradient as its gradient. Draw from a uniform old policy and estimate the
# gradient at $\theta$:

# %%
# NBVAL_CHECK_OUTPUT
old = torch.zeros(4, dtype=torch.float64)  # uniform sampling policy
acts_old = draw(old, N, seed=2)
rho = (pi / torch.softmax(old, -1))[acts_old]  # [N]
for name, w in (("without the ratio", None), ("with the ratio", rho)):
    est = score_function_gradient(theta, acts_old, r, baseline=J, weights=w).mean(0)
    print(f"{name:>17}: {est.numpy().round(4)}  (exact {exact.numpy().round(4)})")
print(f"largest weight: {rho.max().item():.2f}")

# %% [markdown]
# Without the weights the estimate is biased: it counts each answer as often as the
# old policy drew it. With them it is right again, and it pays for that in variance:
# the further $\pi_\theta$ moves from $\pi_{\theta_{\mathrm{old}}}$, the larger the
# weight a rare sample can get.
#
# The rest of this chapter follows from these three facts:
#
# * **The critic.** PPO's baseline is not a constant. It is a learned
#   {term}`value model <Critic (value model)>` $V_\psi$ that predicts the reward to
#   come from every prefix. It is trained beside the policy and is as large as the
#   policy.
# * **The clip.** PPO stops the ratio's gradient once $\rho$ leaves
#   $[1-\varepsilon, 1+\varepsilon]$ on the side the advantage pushes it towards
#   {cite}`schulman2017ppo`. The policy then cannot
#   move far from the one that sampled the data, where the weights would be large
#   and the estimate noisy.
# * **GRPO** keeps the ratio and the clip and replaces the critic by the group mean of
#   the section above: $G$ answers to the same prompt give the mean for free
#   ({ref}`ch02-no-critic`).

# %% [markdown]
# ## The policy ratio
#
# GRPO samples a group with the current weights $\theta_{\mathrm{old}}$, scores it, and
# then takes one or more gradient steps on that same data (TRL's `num_iterations`,
# $\mu$ in DeepSeekMath's Algorithm 1). After the first step the policy being trained
# is no longer the one that sampled the data. The ratio $\rho_{i,t}$ reweights each
# token by how much the policy has moved on it. `probability_ratio` computes it from
# log-probabilities, which is how every trainer stores them:

# %%
show_source(probability_ratio, docstring=False)

# %% [markdown]
# A hand-checkable case: the sampling policy gave a token probability 0.25, the updated
# policy gives it 0.5; a second token did not move.

# %%
# NBVAL_CHECK_OUTPUT
logp = torch.log(torch.tensor([[0.5, 0.2]])).requires_grad_(True)
old_logp = torch.log(torch.tensor([[0.25, 0.2]]))
ratio = probability_ratio(logp, old_logp)
ratio.sum().backward()
print("ratio           :", ratio.detach())
print("d ratio / d logp:", logp.grad)

# %% [markdown]
# The gradient of $\rho$ with respect to the log-probability is $\rho$ itself. In
# particular, on the first step ($\theta = \theta_{\mathrm{old}}$) every ratio is
# exactly 1 and its gradient is $\nabla_\theta \log\pi_\theta$: the objective is then
# the plain policy gradient $\hat A\,\nabla\log\pi_\theta$ of REINFORCE
# {cite}`williams1992reinforce`. {ref}`ch02-toy-batch` checks this on a toy batch.
#
# ## Clip and min
#
# If one token's advantage is positive, the surrogate $\rho\hat A$ grows without bound
# as the policy raises that token's probability; a few large steps on one batch can
# wreck the policy. PPO's fix is to clip the ratio to $[1-\varepsilon, 1+\varepsilon]$
# *and* take the minimum with the unclipped term, so the objective is a pessimistic
# bound: gains beyond the trust region are not counted, losses always are. The heart of
# `clipped_surrogate` is four lines (its arguments are the ratios `[B, T]`, one
# advantage per completion `[B]`, and the clip range; `epsilon_high` is the next
# section's):

# %%
show_source(clipped_surrogate, start="adv = _broadcast_advantages",
            end="return torch.minimum")

# %% [markdown]
# The table below evaluates the surrogate on a grid of ratios for $\hat A = +1$ and
# $\hat A = -1$ at the usual $\varepsilon = 0.2$, together with its derivative with
# respect to $\rho$ (by autograd). A derivative of 0 means the token no longer pushes
# the weights.

# %%
# NBVAL_CHECK_OUTPUT
ratios = torch.tensor([0.5, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.5])
rows = {}
for adv in (1.0, -1.0):
    rho = ratios.clone().view(1, -1).requires_grad_(True)
    surrogate = clipped_surrogate(rho, torch.tensor([adv]), epsilon=0.2)
    surrogate.sum().backward()
    rows[f"surrogate (A={adv:+.0f})"] = surrogate.detach().flatten().tolist()
    rows[f"d/d rho (A={adv:+.0f})"] = rho.grad.flatten().tolist()
table = pd.DataFrame(rows, index=[f"{x:.1f}" for x in ratios.tolist()])
table.index.name = "rho"
print(table.T.to_string(float_format=lambda v: f"{v:+.2f}"))

# %% [markdown]
# Read it column by column:
#
# * **$\hat A > 0$** (a good completion): the surrogate is $\rho\hat A$ until
#   $\rho = 1+\varepsilon$, then flat. Once the policy has raised the token's
#   probability by more than 20 %, the gradient is 0: no further push *up*. Below 1
#   nothing is clipped: if an update accidentally made a good token less likely, the
#   full gradient pulls it back.
# * **$\hat A < 0$** (a bad completion): the mirror image. The surrogate is flat below
#   $1-\varepsilon$: once the token's probability has dropped by more than 20 %, stop
#   pushing it down. Above 1 (the policy made a bad token *more* likely) the unclipped,
#   more negative term wins and the gradient is never switched off.
#
# The picture, with the region where the gradient vanishes shaded:

# %%
grid = torch.linspace(0.3, 1.7, 281)
fig, axes = plt.subplots(1, 2, figsize=(7.5, 3.3), sharex=True, sharey=True)
for ax, adv in zip(axes, (1.0, -1.0)):
    a = torch.tensor([adv])
    ax.plot(grid, (grid * adv), "--", color="grey", label=r"$\rho A$ (unclipped)")
    ax.plot(grid, clipped_surrogate(grid.view(1, -1), a, 0.2).flatten(), lw=2.5,
            label=r"$\min(\rho A,\ \mathrm{clip}(\rho)A)$")
    low, high = clipped_tokens(grid.view(1, -1), a, 0.2)
    flat = (low | high).flatten()
    ax.fill_between(grid, -2, 2, where=flat, color="tab:red", alpha=0.12,
                    label="gradient = 0")
    ax.axvline(1.0, color="black", lw=0.6)
    ax.set(title=f"A = {adv:+.0f}", xlabel=r"ratio $\rho$", ylim=(-1.8, 1.8),
           xticks=[0.5, 1.0, 1.5])  # no tick at the panels' shared edge
axes[0].set_ylabel("surrogate (to maximise)")
axes[0].legend(loc="lower right", fontsize=9)
plt.tight_layout()
plt.show()

# %% [markdown]
# ### Try it: move $\varepsilon$ and $\hat A$
#
# `grpo_lib.widgets.surrogate_explorer` redraws the surrogate for any clip range and
# advantage. Sliders need a live kernel; the rendered book shows the starting state,
# here with DAPO's asymmetric range (next section).

# %%
# NBVAL_IGNORE_OUTPUT
from grpo_lib.widgets import surrogate_explorer

surrogate_explorer(epsilon=0.2, advantage=1.0, epsilon_high=0.28)

# %% [markdown]
# ### Clip-higher
#
# DAPO {cite}`yu2025dapo` observed that the symmetric clip limits how fast an *unlikely*
# good token can grow (their example: a token at probability 0.01 may only reach 0.012
# in one round, while one at 0.9 is barely constrained). It decouples the two ranges,
# $\varepsilon_{\mathrm{low}} = 0.2$ and $\varepsilon_{\mathrm{high}} = 0.28$ (TRL:
# `epsilon`, `epsilon_high`). `clipped_tokens` reports which tokens each side switched
# off; the trainer logs their fractions as `clip_frac_low` and `clip_frac_high`.

# %%
# NBVAL_CHECK_OUTPUT
ratio_row = torch.tensor([[0.75, 0.9, 1.1, 1.25, 1.3]])
for eps_high in (0.2, 0.28):
    for adv in (1.0, -1.0):
        low, high = clipped_tokens(ratio_row, torch.tensor([adv]), 0.2, eps_high)
        print(f"eps_high={eps_high:.2f} A={adv:+.0f}  clipped low: "
              f"{low.int().tolist()[0]}  high: {high.int().tolist()[0]}")

# %% [markdown]
# With $\varepsilon_{\mathrm{high}} = 0.28$ the token at ratio 1.25 and positive
# advantage keeps its gradient; the lower side is unchanged.
#
# ## The KL penalty and three ways to estimate it
#
# The clip bounds one *round* of updates; nothing stops the policy from drifting far
# from where it started over hundreds of rounds, forgetting how to write English while
# it learns to score. GRPO adds a penalty
# $\beta\,\mathbb D_{\mathrm{KL}}[\pi_\theta\|\pi_{\mathrm{ref}}]$ to a frozen copy
# of the initial model. It is the *reverse* KL, an expectation under the policy:
#
# $$
# \mathbb D_{\mathrm{KL}}[\pi_\theta\|\pi_{\mathrm{ref}}] = \mathbb E_{x\sim\pi_\theta}
# \big[\delta(x)\big], \qquad
# \delta(x) = \log\pi_\theta(x) - \log\pi_{\mathrm{ref}}(x).
# $$
#
# $\delta$ is the **reference log-ratio**; the reference ratio itself is
# $\pi_{\mathrm{ref}}(x)/\pi_\theta(x) = e^{-\delta(x)}$. An LLM cannot sum over all
# sequences, so the KL is estimated from the tokens that were sampled anyway, from
# $\pi_\theta$. John Schulman's note {cite}`schulman2020kl` lists three estimators of it
# from one sample:
#
# | | estimator | unbiased? | never negative? |
# |---|---|---|---|
# | $k_1$ | $\delta$ | yes | no |
# | $k_2$ | $\tfrac12\delta^2$ | no | yes |
# | $k_3$ | $e^{-\delta} - 1 + \delta$ | yes, as $\mathbb E[e^{-\delta}] = 1$ | yes, as $e^{-\delta} \ge 1 - \delta$ |
#
# DeepSeekMath uses $k_3$ (its eq. 4 writes it
# $\frac{\pi_{\mathrm{ref}}}{\pi_\theta} - \log\frac{\pi_{\mathrm{ref}}}{\pi_\theta}
# - 1$, the same expression), and so does TRL's `GRPOTrainer`; the tests check
# `kl_estimate` against the expression in TRL's source. Its body, with `delta` for
# $\delta$:

# %%
show_source(kl_estimate, start="delta = logp - ref_logp",
            end="return torch.exp(-delta)")

# %% [markdown]
# By hand: the policy gives a sampled token probability 0.5, the reference 0.25, so
# $\delta = \log 2$ and $e^{-\delta} = 0.5$: $k_1 = \log 2$, $k_2 = (\log 2)^2/2$,
# $k_3 = 0.5 - 1 + \log 2 = \log 2 - 0.5$. Swap the two models ($\delta = -\log 2$)
# and $k_1$ turns negative while $k_3 = 1 - \log 2$ stays positive:

# %%
# NBVAL_CHECK_OUTPUT
half, quarter = torch.log(torch.tensor([[0.5]])), torch.log(torch.tensor([[0.25]]))
for name, lp, ref in (("pi=0.50, ref=0.25", half, quarter),
                      ("pi=0.25, ref=0.50", quarter, half)):
    values = {k: kl_estimate(lp, ref, k).item() for k in ("k1", "k2", "k3")}
    print(name, " ".join(f"{k}={v:+.4f}" for k, v in values.items()))
print(f"check: log 2 = {math.log(2):.4f}, (log 2)^2/2 = {math.log(2) ** 2 / 2:.4f}, "
      f"log 2 - 0.5 = {math.log(2) - 0.5:+.4f}, 1 - log 2 = {1 - math.log(2):+.4f}")

# %% [markdown]
# ### Bias and spread, by sampling
#
# Take a categorical "next-token" distribution over a vocabulary of 1,000 tokens as the
# policy, and a perturbed copy as the reference, at several distances. Sample tokens
# from the policy, evaluate each estimator on every sample, and compare the average
# with the exact KL (a sum over the vocabulary).

# %%
def categorical_pair(vocab: int, spread: float, seed: int = 0):
    """Policy and reference log-probs [V]; reference = policy logits + noise."""
    g = torch.Generator().manual_seed(seed)
    logits = 2.0 * torch.randn(vocab, generator=g, dtype=torch.float64)
    noise = torch.randn(vocab, generator=g, dtype=torch.float64)
    return logits.log_softmax(0), (logits + spread * noise).log_softmax(0)


num_samples = P.pick(smoke=4_000, cpu=100_000, gpu=100_000)
spreads = [0.1, 0.3, 0.6, 1.0, 1.5]
records, samples_at = [], {}
for spread in spreads:
    policy_logp, ref_logp = categorical_pair(1000, spread)
    exact = (policy_logp.exp() * (policy_logp - ref_logp)).sum().item()
    g = torch.Generator().manual_seed(1)
    x = torch.multinomial(policy_logp.exp(), num_samples, replacement=True, generator=g)
    for kind in ("k1", "k2", "k3"):
        values = kl_estimate(policy_logp[x], ref_logp[x], kind)  # [num_samples]
        samples_at[(spread, kind)] = values
        records.append(dict(spread=spread, true_kl=exact, estimator=kind,
                            mean=values.mean().item(),
                            rel_bias=values.mean().item() / exact - 1,
                            rel_std=values.std().item() / exact,
                            frac_negative=(values < 0).double().mean().item()))
kl_table = pd.DataFrame(records)
print(f"{num_samples:,} samples per row")
kl_table.pivot(index=["spread", "true_kl"], columns="estimator",
               values=["rel_bias", "rel_std", "frac_negative"]).round(3)

# %% [markdown]
# `rel_bias` is (mean of the estimates) / KL − 1 and `rel_std` is the standard deviation
# of one sample's estimate divided by the KL. What to notice:
#
# * $k_1$ and $k_3$ average to the true KL (their `rel_bias` is sampling noise, and it
#   shrinks as the sample count grows); $k_2$ is biased, and its bias grows with the
#   distance between the two models (it agrees with the KL only to second order in
#   $\delta$).
# * $k_1$'s spread is the largest by far when the models are close, and many single
#   samples are negative even though the KL is positive. $k_3$ has a small spread and
#   is never negative, which is why a per-token penalty uses it.
# * Far apart, $k_3$'s advantage shrinks: $e^{-\delta} - 1$ can be large for a token
#   that the reference likes much more than the policy, so its spread grows.
#
# The same points, read from the table:

# %%
def kl_row(spread, kind):
    """One row of kl_table: an estimator at one distance."""
    return kl_table.query("spread == @spread and estimator == @kind").iloc[0]


near, far = spreads[0], spreads[-1]
k3_wider = kl_row(far, "k3").rel_std > kl_row(far, "k1").rel_std
k3_negative = kl_row(near, "k3").frac_negative
k3_negative = "none" if k3_negative == 0 else f"{k3_negative:.0%}"
say(f"At the closest pair (spread {near}), "
    f"{kl_row(near, 'k1').frac_negative:.0%} of $k_1$'s one-sample estimates are "
    f"negative and its spread is "
    f"{kl_row(near, 'k1').rel_std / kl_row(near, 'k3').rel_std:.0f} times $k_3$'s; "
    f"{k3_negative} of $k_3$'s are. "
    f"At the farthest (spread {far}), $k_2$'s bias is "
    f"{kl_row(far, 'k2').rel_bias:+.0%} of the KL, and $k_3$'s spread, "
    f"{kl_row(far, 'k3').rel_std:.2f} times the KL, is "
    f"{'larger' if k3_wider else 'not larger'} than $k_1$'s "
    f"({kl_row(far, 'k1').rel_std:.2f}).")

# %% [markdown]
# The one-sample estimates at one distance (top) and the spread and bias at all five
# (bottom, both relative to the KL):

# %%
fig, axes = plt.subplots(2, 1, figsize=(7, 7), constrained_layout=True)
spread = 0.3
k1_values = samples_at[(spread, "k1")]
lo, hi = k1_values.quantile(0.01).item(), k1_values.quantile(0.99).item()
for kind, color in (("k1", "tab:blue"), ("k2", "tab:orange"), ("k3", "tab:green")):
    axes[0].hist(samples_at[(spread, kind)], bins=60, range=(lo, hi), histtype="step",
                 lw=1.5, color=color, label=kind, density=True)
true_kl = kl_table.query("spread == @spread").true_kl.iloc[0]
axes[0].axvline(true_kl, color="black", lw=1, label=f"true KL = {true_kl:.4f}")
axes[0].set(title=f"one-sample estimates, spread = {spread} (1-99% range of k1)",
            xlabel="estimate", ylabel="density")
axes[0].legend(fontsize=9)
for kind, color, marker in (("k1", "tab:blue", "o"), ("k2", "tab:orange", "s"),
                            ("k3", "tab:green", "^")):
    sub = kl_table[kl_table.estimator == kind]
    axes[1].plot(sub.true_kl, sub.rel_std, "-", marker=marker,
                 mfc="none" if kind == "k2" else color, ms=7 if kind == "k2" else 5,
                 color=color, label=f"{kind}: std/KL")  # k2's open squares show
    axes[1].plot(sub.true_kl, sub.rel_bias.abs(), "x:", color=color,
                 label=f"{kind}: |bias|/KL")
axes[1].set(xscale="log", yscale="log", xlabel="true KL(policy || reference)",
            ylabel="ratio to the true KL", title="relative spread and bias")
axes[1].legend(fontsize=9, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.2))
plt.show()

# %% [markdown]
# (ch02-kl-gradient)=
# ## The gradient of the penalty is another matter
#
# The table above is about the *value* of the estimators. A trainer does something
# else with them: it adds $\beta k(x)$ to each sampled token's loss and calls
# `backward()`. The samples are fixed; the gradient flows through $\log\pi_\theta(x)$
# inside $k$ only. In expectation over on-policy samples that gives
#
# $$
# g_k = \mathbb E_{x\sim\pi_\theta}\big[\nabla_\theta k(x)\big],
# $$
#
# which is *not* $\nabla_\theta\,\mathbb E_{x\sim\pi_\theta}[k(x)]$: it misses the
# term that comes from the samples' own distribution depending on $\theta$. Working it
# out with $\nabla\delta = \nabla\log\pi_\theta$ (the reference is frozen):
#
# * $k_1$: $\nabla k_1 = \nabla\log\pi_\theta$, and $\mathbb E_{\pi_\theta}[\nabla\log
#   \pi_\theta] = \sum_x\nabla\pi_\theta(x) = 0$. **No signal in expectation**, only
#   noise.
# * $k_2$: $\nabla k_2 = \delta\,\nabla\log\pi_\theta$, whose expectation
#   $\mathbb E_{\pi_\theta}[\delta\,\nabla\log\pi_\theta]$ is exactly
#   $\nabla_\theta\,\mathbb D_{\mathrm{KL}}[\pi_\theta\|\pi_{\mathrm{ref}}]$: **the
#   reverse-KL gradient**, from the biased estimator.
# * $k_3$: $\nabla k_3 = (1 - e^{-\delta})\nabla\log\pi_\theta$, so
#   $g_{k_3} = \sum_x(\pi_\theta(x) - \pi_{\mathrm{ref}}(x))\nabla\log\pi_\theta(x)
#   = -\mathbb E_{\pi_{\mathrm{ref}}}[\nabla\log\pi_\theta] =
#   \nabla_\theta\,\mathbb D_{\mathrm{KL}}[\pi_{\mathrm{ref}}\|\pi_\theta]$: **the
#   gradient of the forward KL**, not of the reverse KL that $k_3$ estimates.
#
# The check, with autograd, on a 6-way categorical distribution where every expectation
# is an exact sum (probabilities detached = "the samples are fixed"):

# %%
# NBVAL_CHECK_OUTPUT
def kl_gradients(spread: float, vocab: int = 6, seed: int = 0) -> dict:
    """Exact expected loss-gradients of k1/k2/k3 (and rho*k3) and of both KLs."""
    g = torch.Generator().manual_seed(seed)
    theta = torch.randn(vocab, generator=g, dtype=torch.float64, requires_grad=True)
    ref = (theta.detach() + spread * torch.randn(vocab, generator=g,
                                                 dtype=torch.float64)).log_softmax(0)

    def grad(fn):
        return torch.autograd.grad(fn(theta.log_softmax(0)), theta)[0]

    def penalty(kind, ratio_weighted=False):
        def fn(lp):
            weight = probability_ratio(lp, lp.detach()) if ratio_weighted else 1.0
            return (lp.exp().detach() * weight * kl_estimate(lp, ref, kind)).sum()
        return fn

    return {
        "k1 loss": grad(penalty("k1")),
        "k2 loss": grad(penalty("k2")),
        "k3 loss": grad(penalty("k3")),
        "rho * k3 loss": grad(penalty("k3", ratio_weighted=True)),
        "reverse KL(pi||ref)": grad(lambda lp: (lp.exp() * (lp - ref)).sum()),
        "forward KL(ref||pi)": grad(lambda lp: (ref.exp() * (ref - lp)).sum()),
    }


def gap(d: float) -> str:
    """A difference; float64 round-off (its last digit varies by machine) as < 1e-12."""
    return "< 1e-12" if d < 1e-12 else f"{d:.1e}"


grads = kl_gradients(spread=1.0)
for name in ("k1 loss", "k2 loss", "k3 loss", "rho * k3 loss"):
    d_rev = (grads[name] - grads["reverse KL(pi||ref)"]).abs().max().item()
    d_fwd = (grads[name] - grads["forward KL(ref||pi)"]).abs().max().item()
    print(f"{name:>14}: max|g - grad reverse KL| = {gap(d_rev)}   "
          f"max|g - grad forward KL| = {gap(d_fwd)}   |g| = {grads[name].norm():.3f}")

# %% [markdown]
# Zeros (to rounding) where the algebra says so: the $k_1$ loss has no expected
# gradient, the $k_2$ loss follows the reverse KL, the $k_3$ loss follows the forward
# KL. The last row is TRL 1.16's default (`use_bias_correction_kl=True`, which its
# documentation attributes to the DeepSeek-V3.2 paper): multiply $k_3$ by the policy
# ratio $\rho$, whose value is 1 on-policy but whose gradient is
# $\nabla\log\pi_\theta$. Then
# $\nabla(\rho k_3) = (1 - e^{-\delta} + k_3)\nabla\log\pi_\theta
# = \delta\,\nabla\log\pi_\theta$, the reverse-KL gradient.
#
# How much does it matter? Both KLs have the same second-order expansion around
# $\pi_\theta = \pi_{\mathrm{ref}}$ (the Fisher information), so near the reference
# their gradients agree to first order and the difference grows with the distance:

# %%
rel_diff = []
spread_grid = [0.03, 0.1, 0.3, 1.0, 2.0, 3.0]
for s in spread_grid:
    gr = kl_gradients(s)
    rel_diff.append(((gr["k3 loss"] - gr["reverse KL(pi||ref)"]).norm()
                     / gr["reverse KL(pi||ref)"].norm()).item())
plt.figure(figsize=(5.5, 3.4))
plt.loglog(spread_grid, rel_diff, "o-")
plt.xlabel("distance of the reference (spread of its logit noise)")
plt.ylabel("relative difference")
plt.title("k3 loss gradient vs reverse-KL gradient")
plt.tight_layout()
plt.show()
print("relative difference:", ", ".join(f"{s}: {d:.3f}" for s, d in
                                        zip(spread_grid, rel_diff)))

# %% [markdown]
# With a small $\beta$ and a policy that stays close to the reference (what the clip
# and the penalty are for), the two are nearly the same direction; the difference is
# a real one when the policy drifts, and it is the reason TRL changed its default.
# For sequences the same algebra holds token by token, given the prefix; the
# distribution of the prefixes themselves is not differentiated by either form.
#
# (ch02-no-critic)=
# ## Why GRPO drops the critic
#
# PPO estimates each token's advantage with a learned value function $V_\psi$ (via GAE
# {cite}`schulman2016gae`). DeepSeekMath (sec. 4.1) notes that this value function is
# "typically another model of comparable size as the policy model", a substantial
# memory and compute burden, and that in the LLM setting only the last token gets a
# reward, so a per-token value is hard to train. GRPO replaces $V_\psi$ by the group
# mean of {doc}`01_two_plus_three_times_four`. What that saves, in memory, for
# training with AdamW:

# %%
# NBVAL_CHECK_OUTPUT
BYTES = {  # bytes per parameter
    "fp32": dict(weights=4, grads=4, master=0, adam=8),
    # bf16 mixed precision: bf16 weights and grads, fp32 master copy and Adam m, v
    "bf16 mixed": dict(weights=2, grads=2, master=4, adam=8),
}


def model_bytes(num_params: float, precision: str, trained: bool) -> float:
    """Weights (+ grads, master copy and Adam states if trained); no activations."""
    b = BYTES[precision]
    per_param = b["weights"] + (b["grads"] + b["master"] + b["adam"] if trained else 0)
    return num_params * per_param


def setup_gb(num_params, precision, models):
    """models: list of (name, trained) -> total GB (1 GB = 1e9 bytes)."""
    return sum(model_bytes(num_params, precision, t) for _, t in models) / 1e9


SETUPS = {
    "PPO": [("policy", True), ("value", True), ("reference", False),
            ("reward model", False)],
    "PPO, rule reward": [("policy", True), ("value", True), ("reference", False)],
    "GRPO, rule reward": [("policy", True), ("reference", False)],
    "GRPO, beta=0": [("policy", True)],
}
rows = []
for label, n in (("0.5B", 0.5e9), ("7B", 7e9)):
    for precision in BYTES:
        row = {"model": label, "precision": precision}
        for setup, models in SETUPS.items():
            row[setup] = setup_gb(n, precision, models)
        rows.append(row)
memory = pd.DataFrame(rows).set_index(["model", "precision"])
memory["GRPO saves vs PPO (rule reward)"] = (memory["PPO, rule reward"]
                                            - memory["GRPO, rule reward"])
memory.columns = ["PPO", "PPO rule", "GRPO rule", "GRPO b=0", "saved"]
print("GB of weights + gradients + optimizer states (no activations, no KV cache).")
print("'rule' = rule reward, no reward model; 'b=0' = no KL term, no reference;")
print("'saved' = PPO rule - GRPO rule = the critic.")
print(memory.round(1).to_string())
for precision, b in BYTES.items():
    print(f"{precision}: {sum(b.values())} bytes per trained parameter {b}, "
          f"{b['weights']} per frozen parameter")

# %% [markdown]
# Both precisions cost the same per *trained* parameter (printed above: mixed precision
# saves on weights and gradients but keeps an fp32 master copy), and the critic is a
# trained model of the policy's size, so dropping it removes as much memory as training
# the policy itself (the `saved` column): for the 7B model, more than a whole 80 GB GPU
# before a single activation is stored. A frozen model costs only its weights. With
# $\beta = 0$ the reference goes too: DAPO {cite}`yu2025dapo` removes the KL term for
# reasoning RL, and TRL's default `beta` is 0. The price of the group baseline is
# compute: $G$ completions per prompt instead of one.
#
# (ch02-toy-batch)=
# ## The whole objective on a toy batch
#
# Two prompts, $G = 4$ completions each, completions of different lengths padded to
# $T = 5$ tokens. A tiny stand-in "policy" is a table of logits per position; its
# log-probabilities of the sampled tokens play the role of `sequence_logprobs`'s output
# ({doc}`04_causal_lm_shift` computes them from a real model). The rewards of the first
# group are those of {doc}`01_two_plus_three_times_four`.

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(0)
G, B, T, V = 4, 8, 5, 10
rewards = torch.tensor([0.1, 1.1, 1.0, 0.1, 1.0, 0.0, 0.0, 0.0])
lengths = torch.tensor([5, 3, 4, 2, 5, 5, 3, 1])  # real tokens per completion
mask = (torch.arange(T) < lengths[:, None]).float()  # [B, T], right padding
policy_logits = torch.randn(B, T, V, requires_grad=True)  # theta
ref_logits = policy_logits.detach() + 0.3 * torch.randn(B, T, V)  # a frozen reference
tokens = torch.distributions.Categorical(logits=policy_logits.detach()).sample()
# tokens: [B, T], sampled from the policy


def token_logprobs(logits):  # stand-in for sequence_logprobs: [B, T]
    return logits.log_softmax(-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


advantages = group_advantages(rewards, G)  # [B]
print("advantages:", advantages)

# %% [markdown]
# The objective, assembled from the pieces: ratio, clipped surrogate, $k_3$ penalty,
# then the mean over each completion's real tokens and the mean over completions.
# On the first iteration the old log-probs are the current ones, detached.

# %%
# NBVAL_CHECK_OUTPUT
epsilon, beta = 0.2, 0.04


def grpo_objective(logp, old_logp, ref_logp, advantages, mask):
    """DeepSeekMath eq. 3 on one batch: a scalar to maximise."""
    ratio = probability_ratio(logp, old_logp)  # [B, T]
    per_token = (clipped_surrogate(ratio, advantages, epsilon)
                 - beta * kl_estimate(logp, ref_logp, "k3"))  # [B, T]
    per_sequence = (per_token * mask).sum(-1) / mask.sum(-1)  # [B]
    return per_sequence.mean()


logp = token_logprobs(policy_logits)  # [B, T], with grad
old_logp = logp.detach()  # the sampling policy = the current one, frozen
ref_logp = token_logprobs(ref_logits)  # [B, T]
J = grpo_objective(logp, old_logp, ref_logp, advantages, mask)
(grad_J,) = torch.autograd.grad(J, policy_logits)
kl_part = ((kl_estimate(logp, ref_logp) * mask).sum(-1) / mask.sum(-1)).mean()
surrogate_part = round(J.item() + beta * kl_part.item(), 6) + 0.0  # no "-0.000000"
print(f"J = {J.item():+.6f}: surrogate part {surrogate_part:+.6f}, "
      f"-beta * KL part {-beta * kl_part.item():+.6f}")

# %% [markdown]
# The value of $\mathcal J$ is only the KL part: every ratio is 1, so completion $i$'s
# token average of $\rho\hat A_i$ is $\hat A_i$, and a group's advantages sum to zero.
# The gradient is not zero. On the first iteration it equals the gradient of the
# REINFORCE form over the batch's $B$ completions,
#
# $$
# \frac1B\sum_{i=1}^{B}\frac{1}{|o_i|}\sum_{t=1}^{|o_i|}\Big(\hat A_i
# \log\pi_\theta(o_{i,t}\mid q,o_{i,<t}) - \beta\,k_3(\delta_{i,t})\Big),
# $$
#
# the "loss is (almost) zero but the model learns" puzzle that {doc}`09_failure_modes`
# returns to:

# %%
# NBVAL_CHECK_OUTPUT
logp = token_logprobs(policy_logits)
reinforce = ((advantages[:, None] * logp - beta * kl_estimate(logp, ref_logp)) * mask
             ).sum(-1) / mask.sum(-1)
(grad_reinforce,) = torch.autograd.grad(reinforce.mean(), policy_logits)
d = (grad_J - grad_reinforce).abs().max().item()
print(f"|grad J| = {grad_J.norm():.4f}, max |grad J - grad REINFORCE form| = "
      f"{'< 1e-7 (float32 round-off)' if d < 1e-7 else f'{d:.1e}'}")

# %% [markdown]
# The trainer's loss (`grpo_lib.losses.policy_loss`, {doc}`07_full_loop`) is built
# from the same
# pieces; with `loss_type="grpo"` and TRL's ratio-weighted KL switched off it is
# $-\mathcal J$:

# %%
# NBVAL_CHECK_OUTPUT
from grpo_lib.losses import policy_loss

loss, _ = policy_loss(token_logprobs(policy_logits), old_logp, advantages, mask,
                      loss_type="grpo", epsilon=epsilon, beta=beta, ref_logp=ref_logp,
                      use_bias_correction_kl=False)
print(f"policy_loss = {loss.item():+.6f}   -J = {-J.item():+.6f}")

# %% [markdown]
# ### Several updates on one batch: the clip at work
#
# With $\mu > 1$ updates per batch (`num_iterations`), the ratios leave 1 and the clip
# starts to bite. Plain gradient ascent on $\mathcal J$ (step size 2), the old log-probs
# frozen, 40 updates on the same batch:

# %%
theta = policy_logits.detach().clone().requires_grad_(True)
history = []
for step in range(40):
    logp = token_logprobs(theta)
    J_step = grpo_objective(logp, old_logp, ref_logp, advantages, mask)
    (g,) = torch.autograd.grad(J_step, theta)
    with torch.no_grad():
        theta += 2.0 * g  # gradient ascent: J is maximised
        ratio = probability_ratio(token_logprobs(theta), old_logp)
        low, high = clipped_tokens(ratio, advantages, epsilon)
        real = mask.bool()
        pos, neg = real & (advantages[:, None] > 0), real & (advantages[:, None] < 0)
        history.append(dict(step=step + 1, J=J_step.item(),
                            ratio_pos=ratio[pos].mean().item(),
                            ratio_pos_max=ratio[pos].max().item(),
                            ratio_neg=ratio[neg].mean().item(),
                            ratio_neg_min=ratio[neg].min().item(),
                            clip_frac=(low | high)[real].float().mean().item()))
hist = pd.DataFrame(history).set_index("step")
fig, axes = plt.subplots(1, 2, figsize=(7.5, 3.2))
for side, color in (("pos", "tab:green"), ("neg", "tab:red")):
    extreme = "max" if side == "pos" else "min"
    axes[0].plot(hist.index, hist[f"ratio_{side}"], color=color,
                 label=f"A {'>' if side == 'pos' else '<'} 0: mean")
    axes[0].plot(hist.index, hist[f"ratio_{side}_{extreme}"], ":", color=color,
                 label=extreme)
axes[0].set(title="ratio of the batch's tokens", xlabel="update")
axes[0].legend(fontsize=9)
for y in (1 - epsilon, 1 + epsilon):
    axes[0].axhline(y, color="grey", lw=0.8, ls="--")
hist["clip_frac"].plot(ax=axes[1], title="fraction of tokens clipped",
                       xlabel="update")
plt.tight_layout()
plt.show()
print(hist.iloc[[0, 4, 9, 19, 39]].round(3).to_string())

# %% [markdown]
# What to notice: the tokens of good completions rise and the tokens of bad ones fall
# until they cross $1 \pm \varepsilon$ (dashed); from there on they are clipped, the
# fraction of clipped tokens climbs towards 1 and $\mathcal J$ stops growing. A token
# overshoots its boundary by at most the step that carried it across (the dotted
# extremes); after that only the small KL term moves it. That is the trust region in
# practice: however many updates are taken on one batch, the policy cannot run far on
# it.
#
# ## Exercises
#
# Each exercise has a stub to fill in and a checker from `grpo_lib.exercises.ch02` that
# says what is wrong. Until you fill in a stub, its cell prints a hint; solutions are in
# the appendix, {doc}`../book/solutions/ch02`.
#
# **2.1 — The clipped surrogate.** Write `my_clipped_surrogate(ratio, advantages,
# epsilon)` for `ratio` of shape `[B, T]` and `advantages` of shape `[B]`, without
# calling `grpo_lib`.

# %%
from grpo_lib.exercises.ch02 import (check_clipped_surrogate, check_grpo_objective,
                                     check_k3)


def my_clipped_surrogate(ratio, advantages, epsilon):
    # your code here
    raise NotImplementedError


try:
    check_clipped_surrogate(my_clipped_surrogate)
except NotImplementedError:
    print("Not implemented yet: the surrogate table above shows which of the two terms "
          "the min keeps on each side of 1; mind the shapes [B, T] and [B].")

# %% [markdown]
# **2.2 — The k3 estimator.** Write `my_k3(logp, ref_logp)`: the per-token $k_3$
# estimate of $\mathbb D_{\mathrm{KL}}[\pi_\theta\|\pi_{\mathrm{ref}}]$ from the
# log-probabilities of the sampled tokens under the policy (`logp`) and the reference
# (`ref_logp`), both `[B, T]`. Then, in words: why can $k_3$ never be negative?

# %%
def my_k3(logp, ref_logp):
    # your code here
    raise NotImplementedError


try:
    check_k3(my_k3)
except NotImplementedError:
    print("Not implemented yet: start from the reference log-ratio delta of the KL "
          "section, computed from the two inputs.")

# %% [markdown]
# **2.3 — The objective.** Write `my_grpo_objective(logp, old_logp, ref_logp,
# advantages, mask, epsilon, beta)` returning DeepSeekMath's $\mathcal J$ (eq. 3) for
# one batch, a scalar to maximise: per-token clipped surrogate minus $\beta k_3$,
# averaged over each completion's real tokens, then over completions. You may use your
# functions from 2.1 and 2.2.

# %%
def my_grpo_objective(logp, old_logp, ref_logp, advantages, mask, epsilon, beta):
    # your code here
    raise NotImplementedError


try:
    check_grpo_objective(my_grpo_objective)
except NotImplementedError:
    print("Not implemented yet: follow the formula at the top of the chapter from the "
          "inside out: per token, then per completion, then over the batch.")

# %% [markdown]
# **2.4 — Think.** (a) In the memory table, what does a 7B PPO run with a learned reward
# model cost in bf16 mixed precision if the value model is initialised from the 7B
# reward model, and how much of that is optimizer state? (b) Using
# {ref}`ch02-kl-gradient`: if you
# train with $\beta > 0$ and the $k_3$ penalty *without* the ratio weighting, towards
# which KL does the penalty actually push, and when does the difference matter?

# %% [markdown]
# **2.5 — REINFORCE by hand.** Write `my_reinforce_gradient(logits, actions, rewards,
# baseline)` for the four-answer policy of {ref}`ch02-policy-gradient`: `logits` and
# `rewards` of shape `[K]`, `actions` an `[N]` tensor of sampled indices. Return the
# estimate of $\nabla_\theta \mathcal J$ of shape `[K]`, the mean over the samples of
# $(r(a_n) - b)\,\nabla_\theta\log\pi_\theta(a_n)$, without autograd and without
# calling `grpo_lib`.

# %%
from grpo_lib.exercises.ch02 import check_reinforce_gradient


def my_reinforce_gradient(logits, actions, rewards, baseline):
    # your code here
    raise NotImplementedError


try:
    check_reinforce_gradient(my_reinforce_gradient)
except NotImplementedError:
    print("Not implemented yet: write log softmax(theta)_a out and differentiate it by "
          "hand; one row per sample, then average.")

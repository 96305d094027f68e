"""laplace_bradley_terry against an independent float64 SciPy computation (PoE App. A.5).

Reference, written from the equations: the negative log-likelihood

    f(s, gamma) = -sum_k w_k [p_k log sigmoid(d_k) + (1 - p_k) log sigmoid(-d_k)],
    d_k = s_i - s_j - gamma,

is minimised with ``scipy.optimize.minimize(method="trust-exact")`` (analytic
gradient and Hessian, checked against finite differences below). ``f`` is
invariant under ``s -> s + c 1`` on every connected component, so the
reference adds the centring penalty ``0.5 sum_c (1_c^T s)^2``, which is zero at
the centred optimum and makes the problem strictly convex. The Laplace
covariance of the centred scores is the pseudo-inverse of the Hessian of ``f``
(whose null space is exactly the per-component shifts). For a learnt
``gamma`` the Hessian is the joint ``(N+1) x (N+1)`` one with null vector
``(1, 0)``; its pseudo-inverse is the inverse on ``{1^T s = 0} x R``, i.e. the
covariance of (centred ``s``, ``gamma``), and the score block of it is the
marginal covariance of the centred scores.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize
from scipy.special import expit, log_expit

from jaxrank import Comparisons, laplace_bradley_terry, stack_contexts

GAMMA_PRIOR = 1e-6   # the package default precision of the weak prior on a learnt gamma


# ----------------------------------------------------------------- reference
class SoftBT:
    """f, grad, Hessian of the soft-BT negative log-likelihood in float64 NumPy."""

    def __init__(self, i, j, p, w, n, *, learn=False, gamma=0.0, gamma_prior=GAMMA_PRIOR):
        self.i, self.j = np.asarray(i), np.asarray(j)
        self.p, self.w = np.asarray(p, float), np.asarray(w, float)
        self.n, self.learn, self.gamma, self.gp = n, learn, gamma, gamma_prior
        self.W = np.zeros((len(self.i), n))
        self.W[np.arange(len(self.i)), self.i] += 1
        self.W[np.arange(len(self.i)), self.j] -= 1

    def split(self, x):
        return (x[:self.n], x[self.n]) if self.learn else (x, self.gamma)

    def f(self, x):
        s, g = self.split(x)
        d = self.W @ s - g
        val = -np.sum(self.w * (self.p * log_expit(d) + (1 - self.p) * log_expit(-d)))
        return val + (0.5 * self.gp * g**2 if self.learn else 0.0)

    def grad(self, x):
        s, g = self.split(x)
        r = self.w * (expit(self.W @ s - g) - self.p)
        gs = self.W.T @ r
        return np.concatenate([gs, [-r.sum() + self.gp * g]]) if self.learn else gs

    def hess(self, x):
        s, g = self.split(x)
        q = expit(self.W @ s - g)
        h = self.w * q * (1 - q)
        hss = self.W.T @ (h[:, None] * self.W)
        if not self.learn:
            return hss
        hsg = -self.W.T @ h
        top = np.concatenate([hss, hsg[:, None]], 1)
        return np.concatenate([top, np.concatenate([hsg, [h.sum() + self.gp]])[None]], 0)


def _component_penalty(labels, size):
    """Sum over components of 1_c 1_c^T (padded to ``size`` for a trailing gamma)."""
    n = len(labels)
    pen = np.zeros((size, size))
    for lab in np.unique(labels):
        ind = (labels == lab).astype(float)
        pen[:n, :n] += np.outer(ind, ind)
    return pen


def _components(i, j, n):
    labels = np.arange(n)
    changed = True
    while changed:
        changed = False
        for a, b in zip(i, j):
            lo = min(labels[a], labels[b])
            if labels[a] != lo or labels[b] != lo:
                labels[labels == labels[a]] = lo
                labels[labels == labels[b]] = lo
                changed = True
    return labels


def reference_laplace(i, j, p, w, n, *, debias=False):
    """Float64 SciPy MLE + Laplace covariance; returns (mean, cov, precision, gamma)."""
    p, w = np.asarray(p, float), np.asarray(w, float)
    gamma = 0.0
    if debias == "mean":
        pbar = np.sum(w * p) / np.sum(w)
        gamma = np.log((1 - pbar) / pbar)
    model = SoftBT(i, j, p, w, n, learn=debias == "learn", gamma=gamma)
    size = n + (1 if model.learn else 0)
    pen = _component_penalty(_components(i, j, n), size)
    res = optimize.minimize(lambda x: model.f(x) + 0.5 * x @ pen @ x, np.zeros(size),
                            jac=lambda x: model.grad(x) + pen @ x,
                            hess=lambda x: model.hess(x) + pen,
                            method="trust-exact", options=dict(gtol=1e-9))
    x = res.x
    # trust-exact can stop ("bad approximation") near the rounding floor; polish with plain
    # Newton steps on the penalised (strictly convex) objective and require a tiny gradient
    for _ in range(3):
        x = x - np.linalg.solve(model.hess(x) + pen, model.grad(x) + pen @ x)
    gnorm = np.max(np.abs(model.grad(x) + pen @ x))
    assert gnorm < 1e-11, (res.message, gnorm)
    hj = model.hess(x)
    cov_joint = np.linalg.pinv(hj, rcond=1e-10, hermitian=True)
    cov = cov_joint[:n, :n]
    if model.learn:   # marginal precision of s: Schur complement of the gamma entry
        prec = hj[:n, :n] - np.outer(hj[:n, n], hj[:n, n]) / hj[n, n]
        g = x[n]
    else:
        prec, g = hj, gamma
    return x[:n], cov, prec, g


def _random_connected(rng, n, frac, *, symmetric=False):
    """Random subset of ordered pairs, plus a random cycle so the graph is connected."""
    a, b = np.nonzero(np.triu(~np.eye(n, dtype=bool)))
    keep = rng.random(len(a)) < frac
    a, b = a[keep], b[keep]
    perm = rng.permutation(n)
    a = np.concatenate([a, perm])
    b = np.concatenate([b, np.roll(perm, -1)])
    flip = rng.random(len(a)) < 0.5
    i, j = np.where(flip, b, a), np.where(flip, a, b)
    if symmetric:
        i, j = np.concatenate([i, j]), np.concatenate([j, i])
    return i, j


def _instance(seed, n=7, frac=0.5, symmetric=False, bias=0.0):
    rng = np.random.default_rng(seed)
    i, j = _random_connected(rng, n, frac, symmetric=symmetric)
    s = rng.normal(size=n)
    p = expit(s[i] - s[j] + bias + 0.8 * rng.normal(size=len(i)))
    p = np.clip(p, 0.03, 0.97)
    w = rng.choice([0.5, 1.0, 2.0], len(i))
    return i, j, p, w


def _assert_close(got, want, rtol):
    got, want = np.asarray(got, float), np.asarray(want, float)
    scale = max(np.max(np.abs(want)), 1e-12)
    np.testing.assert_allclose(got, want, atol=rtol * scale, rtol=0)


# ------------------------------------------------------------- the reference itself
def test_reference_hessian_matches_finite_differences():
    i, j, p, w = _instance(0, n=5, symmetric=True)
    for learn in (False, True):
        m = SoftBT(i, j, p, w, 5, learn=learn, gamma=0.3)
        x = np.random.default_rng(1).normal(size=5 + learn)
        h = 1e-5
        num_g = np.array([(m.f(x + h * e) - m.f(x - h * e)) / (2 * h) for e in np.eye(len(x))])
        np.testing.assert_allclose(m.grad(x), num_g, atol=1e-6)
        num_h = np.array([(m.grad(x + h * e) - m.grad(x - h * e)) / (2 * h) for e in np.eye(len(x))])
        np.testing.assert_allclose(m.hess(x), num_h, atol=1e-6)


# ------------------------------------------------------------- float32 (default)
@pytest.mark.parametrize("debias", [False, "mean", "learn"])
def test_matches_scipy_reference_float32(debias):
    """Three random instances per mode, solved in one call (comparison padding via stack_contexts)."""
    n = 7
    ctxs, refs = [], []
    for seed in range(3):
        i, j, p, w = _instance(10 + seed, n=n, frac=0.5, symmetric=debias == "learn", bias=0.4)
        p, w = p.astype(np.float32), w.astype(np.float32)
        ctxs.append(Comparisons.from_pairs(i, j, p, num_items=n, weight=w))
        refs.append(reference_laplace(i, j, p, w, n, debias=debias))
    post = laplace_bradley_terry(stack_contexts(ctxs), debias=debias)
    assert post.mean.dtype == jnp.float32
    for k, (mean, cov, prec, _) in enumerate(refs):
        _assert_close(post.mean[k], mean, 1e-4)
        _assert_close(post.precision[k], prec, 1e-4)
        _assert_close(post.covariance[k], cov, 1e-4)
        _assert_close(post.stderr[k], np.sqrt(np.diag(cov)), 1e-4)


# ------------------------------------------------------------- float64, tight
@pytest.mark.parametrize("debias", [False, "mean", "learn"])
def test_matches_scipy_reference_float64(debias):
    n = 8
    i, j, p, w = _instance(20, n=n, frac=0.6, symmetric=debias == "learn", bias=-0.5)
    mean, cov, prec, _ = reference_laplace(i, j, p, w, n, debias=debias)
    with jax.enable_x64(True):
        c = Comparisons.from_pairs(i, j, np.asarray(p, np.float64), num_items=n,
                                   weight=np.asarray(w, np.float64))
        post = laplace_bradley_terry(c, debias=debias)
        assert post.mean.dtype == jnp.float64
        got = [np.asarray(x) for x in (post.mean, post.covariance, post.precision, post.stderr)]
    _assert_close(got[0], mean, 1e-8)
    _assert_close(got[1], cov, 1e-8)
    _assert_close(got[2], prec, 1e-8)
    _assert_close(got[3], np.sqrt(np.diag(cov)), 1e-8)


def test_learnt_gamma_marginal_differs_from_fixed_gamma():
    """With gamma learnt, the score covariance must include gamma's uncertainty.

    Reference: the score block of pinv(joint Hessian) is larger (in the PSD order)
    than pinv of the score block at the same point; the package must give the former.
    """
    n = 6
    i, j, p, w = _instance(30, n=n, frac=0.4, symmetric=False, bias=0.7)
    # no reverse orders: gamma is identified only through cycles, so it is correlated with s
    mean, cov, prec, g = reference_laplace(i, j, p, w, n, debias="learn")
    m = SoftBT(i, j, p, w, n, learn=True)
    hss = m.hess(np.concatenate([mean, [g]]))[:n, :n]
    naive = np.linalg.pinv(hss, rcond=1e-10, hermitian=True)
    assert np.linalg.eigvalsh(cov - naive).min() > -1e-10
    assert np.abs(cov - naive).max() > 1e-3          # the difference is real
    with jax.enable_x64(True):
        c = Comparisons.from_pairs(i, j, np.asarray(p, np.float64), num_items=n,
                                   weight=np.asarray(w, np.float64))
        post = laplace_bradley_terry(c, debias="learn")
        got = np.asarray(post.covariance)
    _assert_close(got, cov, 1e-7)


# ------------------------------------------------------------- structure, gauge
def test_gauge_structure():
    i, j, p, w = _instance(40, n=6)
    c = Comparisons.from_pairs(i, j, p.astype(np.float32), num_items=6, weight=w.astype(np.float32))
    post = laplace_bradley_terry(c)
    mean, cov, prec = (np.asarray(x, float) for x in post[:3])
    one = np.ones(6)
    assert abs(mean.sum()) < 1e-5                                     # centred
    np.testing.assert_allclose(prec @ one, 0, atol=1e-5)              # Laplacian: shifts are free
    np.testing.assert_allclose(cov @ one, 0, atol=1e-5)               # covariance of centred scores
    np.testing.assert_allclose(cov, cov.T, atol=1e-7)
    np.testing.assert_allclose(prec @ cov, np.eye(6) - np.outer(one, one) / 6, atol=1e-4)  # = H^+
    # relabelling the items permutes the posterior (mean and covariance) accordingly
    perm = np.random.default_rng(41).permutation(6)
    inv = np.argsort(perm)
    c2 = Comparisons.from_pairs(inv[i], inv[j], p.astype(np.float32), num_items=6, weight=w.astype(np.float32))
    post2 = laplace_bradley_terry(c2)
    np.testing.assert_allclose(np.asarray(post2.mean)[inv], mean, atol=1e-5)
    np.testing.assert_allclose(np.asarray(post2.covariance)[np.ix_(inv, inv)], cov, atol=1e-5)


def test_disconnected_graph_and_isolated_item_float64():
    # components {0,1,2}, {3,4,5,6}, isolated item 7
    rng = np.random.default_rng(50)
    i = np.array([0, 1, 2, 0, 3, 4, 5, 6, 3, 5])
    j = np.array([1, 2, 0, 2, 4, 5, 6, 3, 5, 4])
    p = rng.uniform(0.1, 0.9, len(i))
    w = np.ones(len(i))
    mean, cov, prec, _ = reference_laplace(i, j, p, w, 8)
    with jax.enable_x64(True):
        post = laplace_bradley_terry(Comparisons.from_pairs(i, j, p, num_items=8))
        got = [np.asarray(x) for x in post[:3]]
    assert abs(got[0][:3].sum()) < 1e-9 and abs(got[0][3:7].sum()) < 1e-9 and got[0][7] == 0
    _assert_close(got[0], mean, 1e-8)
    _assert_close(got[1], cov, 1e-8)
    _assert_close(got[2], prec, 1e-8)
    assert np.all(got[1][7] == 0) and np.all(got[1][:, 7] == 0)
    assert np.all(got[1][:3, 3:] == 0)                                   # no cross-component covariance


def test_batched_padded_equals_per_context_and_vmap():
    ctxs, refs = [], []
    for k, n in enumerate((5, 7, 6)):
        i, j, p, w = _instance(60 + k, n=n, frac=0.5)
        ctxs.append(Comparisons.from_pairs(i, j, p.astype(np.float32), num_items=n, weight=w.astype(np.float32)))
        refs.append(reference_laplace(i, j, p.astype(np.float32), w, n))
    batch = stack_contexts(ctxs)
    post = laplace_bradley_terry(batch)
    assert post.mean.shape == (3, 7) and post.covariance.shape == (3, 7, 7)
    vm = jax.vmap(lambda cc: laplace_bradley_terry(cc))(batch)
    for k, n in enumerate((5, 7, 6)):
        mean, cov, prec, _ = refs[k]
        _assert_close(post.mean[k, :n], mean, 1e-4)
        _assert_close(post.covariance[k, :n, :n], cov, 1e-4)
        _assert_close(post.precision[k, :n, :n], prec, 1e-4)
        assert np.all(np.asarray(post.mean[k, n:]) == 0)
        assert np.all(np.asarray(post.covariance[k, n:]) == 0) and np.all(np.asarray(post.covariance[k, :, n:]) == 0)
        assert np.all(np.asarray(post.stderr[k, n:]) == 0)
    for a, b in zip(vm, post):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)


# ------------------------------------------------------------- coverage
def test_laplace_intervals_cover_true_scores():
    """Data simulated FROM the soft-BT model; nominal 95% intervals must cover ~95%.

    Each comparison of the full symmetric set (N = 10, 90 comparisons) is made m = 5 times:
    p_k is the fraction of m Bernoulli(sigmoid(s_i - s_j)) draws and weight m (the
    package's "weight m = the comparison made m times"), so the soft-BT likelihood is
    the exact binomial likelihood and the Laplace covariance is the right one.
    (With weight 1 the Hessian would be m times too small and the intervals too wide.)
    """
    n, m, reps = 10, 5, 400
    rng = np.random.default_rng(123)
    a, b = np.nonzero(~np.eye(n, dtype=bool))
    true = rng.normal(scale=0.6, size=(reps, n))
    prob = expit(true[:, a] - true[:, b])
    p = rng.binomial(m, prob) / m
    c = Comparisons.from_pairs(np.broadcast_to(a, p.shape), np.broadcast_to(b, p.shape),
                               p.astype(np.float32), num_items=n,
                               weight=np.full(p.shape, float(m), np.float32))
    post = laplace_bradley_terry(c)                    # ONE batched call over all replicates
    mean, se = np.asarray(post.mean, float), np.asarray(post.stderr, float)
    assert mean.shape == (reps, n)
    centred = true - true.mean(axis=1, keepdims=True)
    covered = np.abs(mean - centred) <= 1.96 * se
    coverage = covered.mean()
    print(f"\nLaplace 95% interval coverage: {coverage:.4f} over {covered.size} intervals")
    assert 0.90 <= coverage <= 0.99
    # sanity: the stderr is not vacuous (much smaller than the spread of the true scores)
    assert np.median(se) < 0.5 * centred.std()


# ------------------------------------------------------------- samples, score and rank intervals
def _soft_bt_data(seed, reps, n, m):
    """All ordered pairs of n items, each judged m times under soft BT (as in the coverage test above)."""
    from jaxrank.uncertainty import laplace_bradley_terry as _lap  # noqa: F401
    rng = np.random.default_rng(seed)
    a, b = np.nonzero(~np.eye(n, dtype=bool))
    true = rng.normal(scale=0.6, size=(reps, n))
    p = rng.binomial(m, expit(true[:, a] - true[:, b])) / m
    c = Comparisons.from_pairs(np.broadcast_to(a, p.shape), np.broadcast_to(b, p.shape), p.astype(np.float32),
                               num_items=n, weight=np.full(p.shape, float(m), np.float32))
    return c, true - true.mean(axis=1, keepdims=True)


def test_posterior_samples_have_the_posterior_moments():
    from jaxrank.uncertainty import posterior_samples
    c, _ = _soft_bt_data(1, 2, 6, 3)
    post = laplace_bradley_terry(c)
    s = np.asarray(posterior_samples(post, key=jax.random.key(0), num_samples=20000), float)
    assert s.shape == (20000, 2, 6)
    np.testing.assert_allclose(s.mean(0), post.mean, atol=0.02)
    for k in range(2):
        np.testing.assert_allclose(np.cov(s[:, k].T), post.covariance[k], atol=0.02)
    np.testing.assert_allclose(s.sum(-1), 0, atol=1e-4)                   # centred like the mean


def test_score_and_rank_intervals_cover_the_truth():
    """Laplace score intervals and posterior-sampled rank intervals on data simulated from soft BT.

    300 contexts x 8 items; 2400 intervals of each kind (8 per context, dependent), so the
    tolerance is wider than the binomial sd 0.0045. Rank intervals are integer intervals
    built from "lower"/"higher" quantiles, so they are conservative: coverage >= ~0.95.
    """
    from jaxrank.uncertainty import rank_intervals, score_intervals
    c, centred = _soft_bt_data(2, 300, 8, 4)
    post = laplace_bradley_terry(c)
    lo, hi = (np.asarray(x, float) for x in score_intervals(post, level=0.95))
    cover_s = ((lo <= centred) & (centred <= hi)).mean()
    ri = rank_intervals(post, key=jax.random.key(1), num_samples=1000, level=0.95)
    true_rank = 1 + (centred[:, None, :] > centred[:, :, None]).sum(-1)
    cover_r = ((np.asarray(ri.lower) <= true_rank) & (true_rank <= np.asarray(ri.upper))).mean()
    width = (np.asarray(ri.upper) - np.asarray(ri.lower)).mean()
    print(f"\nLaplace 95% score interval coverage {cover_s:.4f}; rank interval coverage {cover_r:.4f} "
          f"(mean width {width:.2f} ranks of 8)")
    assert 0.92 <= cover_s <= 0.975
    assert 0.93 <= cover_r <= 0.995
    assert width < 4                                                     # informative
    assert np.all(np.asarray(ri.lower) <= np.asarray(ri.rank)) and np.all(np.asarray(ri.rank) <= np.asarray(ri.upper))
    assert np.all(np.asarray(ri.rank).min(-1) == 1)


def test_rank_intervals_padding_and_ranking_confidence():
    from jaxrank.uncertainty import rank_intervals, ranking_confidence
    ctxs = []
    for k, n in enumerate((5, 7)):
        i, j, p, w = _instance(70 + k, n=n, frac=0.7)
        ctxs.append(Comparisons.from_pairs(i, j, p.astype(np.float32), num_items=n, weight=w.astype(np.float32)))
    b = stack_contexts(ctxs)
    post = laplace_bradley_terry(b)
    ri = rank_intervals(post, key=jax.random.key(0), num_samples=500, where=b.item_mask)
    assert np.all(np.asarray(ri.lower)[0, 5:] == 0) and np.asarray(ri.upper)[0, :5].max() <= 5
    assert sorted(np.asarray(ri.rank)[0, :5].tolist()) == [1, 2, 3, 4, 5]
    sp = ranking_confidence(post, key=jax.random.key(1), where=b.item_mask)
    adj = ranking_confidence(post, rule="adjacent", where=b.item_mask)
    assert sp.shape == adj.shape == (2,)
    assert np.all((-1 <= np.asarray(sp)) & (np.asarray(sp) <= 1)) and np.all((0.5 <= adj) & (adj <= 1))
    # "adjacent" against its closed form, context 1 (no padding)
    from scipy.stats import norm
    m, cov = np.asarray(post.mean[1], float), np.asarray(post.covariance[1], float)
    o = np.argsort(-m)
    want = np.mean([norm.cdf((m[x] - m[y]) / np.sqrt(cov[x, x] + cov[y, y] - 2 * cov[x, y])) for x, y in zip(o[:-1], o[1:])])
    np.testing.assert_allclose(adj[1], want, rtol=1e-4)
    # more data, more confidence: the same comparisons made 10 times
    import dataclasses
    post10 = laplace_bradley_terry(dataclasses.replace(b, weight=b.weight * 10))
    assert np.all(np.asarray(ranking_confidence(post10, key=jax.random.key(1), where=b.item_mask)) > np.asarray(sp))
    with pytest.raises(ValueError, match="key"):
        ranking_confidence(post)
    with pytest.raises(ValueError, match="rule"):
        ranking_confidence(post, rule="kendall")
    with pytest.raises(ValueError, match="level"):
        rank_intervals(post, key=jax.random.key(0), level=95)
    with pytest.raises(ValueError, match="GaussianPosterior"):
        rank_intervals(post.mean, key=jax.random.key(0))


def test_laplace_stderr_keeps_float32_precision_with_millions_of_comparisons():
    """H = 10^5-scale Laplacian: (H + P)^{-1} - P would cancel O(1/N) against O(1e-5) in float32."""
    rng = np.random.default_rng(3)
    n = 30
    a, b = np.nonzero(~np.eye(n, dtype=bool))
    s = rng.normal(size=n)
    p = 1 / (1 + np.exp(-(s[a] - s[b])))
    w = np.full(len(a), 2e4)                            # 17 million comparisons in all
    post = laplace_bradley_terry(Comparisons.from_pairs(a, b, p.astype(np.float32), num_items=n,
                                                        weight=w.astype(np.float32)))
    h = np.zeros((n, n))                                # float64 Hessian at the exact optimum
    q = p * (1 - p) * w                                  # every pair compared: the optimum is s itself
    np.add.at(h, (a, a), q); np.add.at(h, (b, b), q); np.add.at(h, (a, b), -q); np.add.at(h, (b, a), -q)
    se = np.sqrt(np.diag(np.linalg.pinv(h)))
    np.testing.assert_allclose(post.stderr, se, rtol=2e-3)

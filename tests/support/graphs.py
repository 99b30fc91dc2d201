"""Random graphs, peaked scores and the dual certificate that graphmax's tests share."""

import numpy as np
import scipy.sparse as sp
import torch
from scipy.special import logsumexp

F64 = torch.float64


def random_graph(n, density=0.1, seed=0, empty_rows=()):
    """Row-normalised random bigram-like graph A = D^-1 C (rows in empty_rows have no successor)."""
    rng = np.random.default_rng(seed)
    C = sp.random(
        n,
        n,
        density=density,
        random_state=rng,
        format="csr",
        data_rvs=lambda k: rng.integers(1, 20, size=k).astype(float),
    )
    C = C.tolil()
    for i in empty_rows:
        C[i, :] = 0
    C = C.tocsr()
    rowsum = np.asarray(C.sum(1)).ravel()
    return sp.diags(1.0 / (rowsum + 1e-6)) @ C


def objective(x, z, A, lam):
    Bx = x - A @ x
    nz = x > 0
    return -x @ z + np.sum(x[nz] * np.log(x[nz])) + lam * Bx @ Bx


def dual_certificate(x, z, A, lam):
    """f(x) + g(2 lam (I - A) x), computed densely from the definition."""
    B = np.eye(len(z)) - A.toarray()
    u = 2 * lam * B @ x
    return objective(x, z, A, lam) + logsumexp(z - B.T @ u) + u @ u / (4 * lam)


def sparse_graph(n, touched, density=0.3, seed=0):
    """A random graph on the first ``touched`` of n tokens; the others have no edge at all."""
    A = random_graph(touched, density=density, seed=seed)
    A.resize((n, n))
    return A.tocsr()


def peaked_scores(rows, n, touched, seed, dtype=F64):
    """Scores whose mass lies mostly on the graph's tokens, as on a real corpus."""
    z = torch.randn(rows, n, generator=torch.Generator().manual_seed(seed), dtype=dtype) * 3
    z[:, touched:] -= 3.0
    return z

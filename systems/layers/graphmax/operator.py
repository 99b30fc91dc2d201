"""graphmax (graph-regularised softmax, graphmax-jair section 2.4) as a plain operator.

For scores ``z`` over N tokens and a row-normalised corpus graph ``A`` (A~ in the paper),
graphmax is the minimiser over the probability simplex of

    f(x) = -<x, z> + <x, log x> + lam * ||x - A x||^2                      (paper eq. 3)

Writing ``B = I - A`` and ``M = B^T B``, the optimum is the fixed point
``x = softmax(z - 2 lam M x)``. ``M`` is never formed: every product goes through ``A`` and
``A^T`` stored as CSR, applied to a batch of rows at once (scipy on the CPU, torch sparse CSR on
CUDA).

Two solvers, chosen by name:

``solver="exact"`` (default) - fixed point in logit space, from ``y0 = z``. The plain damped
    iteration ``y <- y + theta (z - 2 lam M softmax(y) - y)`` diverges once ``2 lam`` times the
    curvature of M on the support exceeds about 1 (many contexts at lam = 1, all at lam >= 3
    on real graphs), and with a fixed theta it crawls where it barely converges. Each row
    therefore takes the safeguarded step

        y <- y + theta * (r - <x, r>) / (1 + 2 lam diag(M) x),   r = z - 2 lam M x - y,

    which is entropic mirror descent on f scaled per token by the diagonal of the fixed
    point's Jacobian ``I + 2 lam M diag(x)`` (frequent tokens have large ``M_ii`` and would
    overshoot). theta starts at 0.7 per row; a step that increases f(x) (beyond f's rounding
    error) is taken back and that row's theta halved, an accepted step lets it grow by 1.5 up
    to 0.85. The merit is f itself because the step is a descent direction for f; it is not
    one for the duality gap, and a gap-based safeguard stalls (seen on SmolLM2 contexts).
    ``safeguard=False`` runs the plain iteration with ``theta = theta0``, for comparison.
    Every iterate carries a certificate, the duality gap

        gap(x) = f(x) + g(u),  u = 2 lam B x,  g(u) = logsumexp(z - B^T u) + ||u||^2 / (4 lam)

    (``-g`` is the Lagrange dual of f, so ``f(x) - f(x*) <= gap``), which equals
    ``KL(x || softmax(z - 2 lam M x))``; it is computed in the form
    ``log sum_i x_i exp(d_i) - sum_i x_i d_i`` with d the centred logit residual, which keeps
    its accuracy far below 1e-16 instead of cancelling there. A row stops when its relative
    gap ``gap / max(1, |f(x)|)`` is <= ``tol`` (default 1e-6) or after ``max_iter`` steps;
    "iterations" counts the steps taken, rejected ones included (each costs one product with
    M). The returned x is the last accepted iterate, whose gap is the one reported.

    Tokens that no edge of the graph touches are solved in closed form
    (``maxbench.systems.layers.graphmax.isolated``): each is a scalar fixed point given the
    normaliser, and the light ones (nearly all) enter every sum as a short series in
    ``exp(-c)``. The iteration then runs on the touched and the few heavy isolated tokens
    only (a third of the vocabulary on the food-reviews graph), and the gap and f stay those
    of the full problem. Graphs that touch more than 60% of the vocabulary keep all tokens.

    The first step is not the diagonal one but Newton's method on each row's 32 likeliest
    tokens, with everything else held where the first evaluation found it
    (``maxbench.systems.layers.graphmax.presolve``; M among them from a table of the graph's 2,048
    hubs): it places the tokens that carry the mass close to the optimum, and the solver then
    needs 3.3 steps in place of 5.5 on real food-review problems (4.2 of 6.0 on movie reviews).
    A row where that step increases f takes it back and the plain step instead.

    On the CPU, float32 problems run in numba kernels (``maxbench.systems.layers.graphmax.kernels.exact``): an
    evaluation is the graph product and three reads of the block (the step with the softmax's
    exponential, the residual and its centre, the gap's sums with the next direction) where
    torch's operations make about 25 passes, with an exponential of its own that vectorises
    (within 2 ulp); every column's gap is then the exact one (e^d - 1 costs no extra pass).
    Sums run over fixed chunks of rows in float64, so the result does not depend on the thread
    count (but for two rare fallbacks, see exact_kernels). float64, CUDA and ``backend="torch"``
    take torch's operations; the two paths differ in rounding, and in the light isolated
    tokens' log x, where the kernel takes ``-W(t)`` and torch ``log(W(t) / t)`` of the same
    4-term series (at most 5 t^4 apart: 5e-8 at t = 0.01) (tests/test_exact_kernels.py).
    Finished problems leave the block in groups (an eighth of it at a time, ``COMPACT``): the
    copy of the blocks costs about what a step of that many columns does.

    ``topk=k`` restricts the support to the union over the batch of each row's k largest
    scores S: x is zero outside S, and the restricted problem keeps every row of the graph,
    i.e. uses ``A[:, S]`` (N x |S|), because ``||(I - A) x||^2`` sums over all N rows even
    when x lives on S (the square block ``A[S, S]`` drops those rows and changes the result).
    The reported gap is then the certificate for the full, unrestricted problem.

``solver="paper"`` - Algorithm 1 of the paper exactly as printed: ``x^1 = 0``; ``while t < T``
    (t = 1, 2, ...: T - 1 updates, 19 for T = 20) take ``a = x - alpha grad f(x)`` with
    ``grad f(x) = -z + log x + 1 + 2 lam M x`` (eq. 8) and project ``a`` onto the simplex by
    sorting (steps 4-7); stop when ``||x^{t+1} - x^t||_2 < 1e-4``. ``alpha = 1e-4``, ``T = 20``.
    The paper does not say what ``log 0`` is; here ``log x`` is taken as
    ``log(max(x, log_floor))`` with ``log_floor = 1e-10`` (a parameter). Because the gradient's
    log term is then the same constant for every coordinate at ``x^1 = 0``, the first step is
    exactly ``sparsemax(alpha z)``. After that, the clamp rewards coordinates that are exactly
    zero, and the iteration falls into a period-2 cycle that never meets the stop rule: the
    output is close to uniform over thousands of tokens, depends on ``log_floor`` and on the
    parity of T, hardly depends on the graph, and is NOT the minimiser of eq. 3 (its reported
    gap shows how far it is). It is here to reproduce the paper, not as graphmax. It runs in
    ``maxbench.systems.layers.graphmax.paper`` (fused numba kernels on the CPU, torch elsewhere).

Probabilities come back on z's device and dtype; float64 scores are solved in float64, all
others in float32 (half the memory traffic; the safeguard allows for f's rounding error, and
the float32 gaps agree with float64 certificates of the same x). A float32 problem that has not
converged after ``max_iter`` steps is solved again in float64, where the safeguard sees f's
changes that float32 rounds away (one movie-review problem in 3,072 crawled at a gap of 2e-3
for 100 steps in float32 and converged in 8 in float64); its iterations are the sum of both.
Only the exact solver is differentiable; its backward is implicit (not unrolled):
``dL/dz = S (I + 2 lam M S)^{-1} g`` with ``S = diag(x) - x x^T``, solved by conjugate
gradients on the equivalent symmetric system
``R^T (I + 2 lam R M R^T)^{-1} R g``, ``R = (I - s s^T) diag(s)``, ``s = sqrt(x)``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from maxbench.errors import MaxbenchError
from maxbench.systems.layers.base import all_finite
from maxbench.systems.layers.graphmax import isolated as graphmax_isolated
from maxbench.systems.layers.graphmax import paper as graphmax_paper
from maxbench.systems.layers.graphmax import presolve as graphmax_presolve
from maxbench.systems.layers.graphmax.kernels import loader as cpu_kernels

__all__ = ["graphmax", "check_graphmax_args", "GraphmaxInfo", "GraphOperator", "SOLVERS"]

SOLVERS = ("exact", "paper")
# Largest step of the safeguarded solver: measured on SmolLM2 logits with the food and movie
# review graphs (lam 1 and 10), 0.85 needed fewer steps than 1 (fewer rejected steps) or 0.7.
_THETA_MAX = 0.85
# Done problems leave the solver's block once they are 1/COMPACT of it: dropping columns copies
# three blocks, about what a step of an eighth of the columns costs (food reviews, batch 48).
COMPACT = 8
# The kernels' graph product (paper_kernels.residual) from this many columns; scipy's or torch's
# below, where the kernel's cost per edge dominates (1.3 ms against 0.4 for one column, food).
_KERNEL_PRODUCT_WIDTH = 32


# --------------------------------------------------------------------------------------
# The graph as the operator M = (I - A)^T (I - A) on batches of rows
# --------------------------------------------------------------------------------------


def _to_scipy_csr(A):
    import scipy.sparse as sp

    if sp.issparse(A):
        return sp.csr_matrix(A, dtype=np.float64)
    if torch.is_tensor(A):
        if A.layout == torch.strided:
            return sp.csr_matrix(A.detach().cpu().double().numpy())
        coo = A.detach().to_sparse_coo().coalesce().cpu()
        rows, cols = coo.indices().numpy()
        return sp.csr_matrix((coo.values().double().numpy(), (rows, cols)), shape=tuple(coo.shape))
    if isinstance(A, np.ndarray):
        return sp.csr_matrix(A.astype(np.float64))
    raise MaxbenchError(
        f"graphmax: the graph must be a scipy sparse matrix, a torch tensor or a CorpusGraph, got {type(A).__name__}"
    )


def _torch_csr(csr, device, dtype=torch.float64) -> torch.Tensor:
    return _csr_tensor(
        torch.from_numpy(csr.indptr.astype(np.int64)),
        torch.from_numpy(csr.indices.astype(np.int64)),
        torch.from_numpy(csr.data).to(dtype),
        csr.shape,
        device,
    )


def _csr_tensor(crow, col, val, shape, device=None) -> torch.Tensor:
    # The index arrays come from scipy or from slicing a valid CSR tensor, so torch's
    # invariant checks would only cost time; its "beta" notice is not for our users.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, col, val, size=tuple(shape), device=device, check_invariants=False)


class GraphOperator:
    """``M = (I - A)^T (I - A)`` applied to a batch of rows (batch x N), on one device.

    ``backend`` is "scipy" (CPU: scipy's CSR times a dense N x batch block; with more than one
    torch thread the same arrays go through torch's CSR kernel, which splits the rows over the
    threads and gives scipy's bits) or "torch" (torch sparse CSR; the only choice on CUDA, and
    usable on the CPU so that tests cover the CUDA code path). The matrices are kept in float64
    and converted once per compute dtype.
    """

    def __init__(self, A, AT=None, device="cpu", backend: str | None = None):
        A = _to_scipy_csr(A)
        if A.ndim != 2 or A.shape[0] != A.shape[1]:
            raise MaxbenchError(f"graphmax: the graph must be a square N x N matrix, got shape {A.shape}")
        if not np.isfinite(A.data).all():
            raise MaxbenchError("graphmax: the graph holds NaN or infinite weights; rebuild it")
        AT = A.T.tocsr() if AT is None else _to_scipy_csr(AT)
        self.n = A.shape[0]
        self.device = torch.device(device)
        self.backend = backend or ("scipy" if self.device.type == "cpu" else "torch")
        if self.backend == "scipy" and self.device.type != "cpu":
            raise MaxbenchError("graphmax: the scipy backend runs on the CPU only; use backend='torch' on CUDA")
        if self.backend not in ("scipy", "torch"):
            raise MaxbenchError(f"graphmax: unknown backend '{backend}'; use 'scipy' or 'torch'")
        self._scipy = {"A": A, "AT": AT}
        self._by_dtype: dict = {}
        self._diag_m: torch.Tensor | None = None

    @classmethod
    def prepare(cls, graph, device, backend: str | None = None) -> GraphOperator:
        """Accept a GraphOperator, a CorpusGraph (anything with ``.A`` and ``.AT``), a scipy
        sparse matrix or a torch (sparse) tensor; reuse a GraphOperator already on ``device``."""
        device = torch.device(device)
        if isinstance(graph, GraphOperator):
            if graph.device == device and (backend is None or backend == graph.backend):
                return graph
            return cls(graph._scipy["A"], graph._scipy["AT"], device=device, backend=backend)
        if hasattr(graph, "A") and hasattr(graph, "AT"):
            return cls(graph.A, graph.AT, device=device, backend=backend)
        return cls(graph, device=device, backend=backend)

    def matrices(self, dtype: torch.dtype):
        """(A, A^T) in the backend's format and the given dtype, converted once."""
        if dtype not in self._by_dtype:
            A, AT = self._scipy["A"], self._scipy["AT"]
            if self.backend == "scipy":
                np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
                self._by_dtype[dtype] = (A.astype(np_dtype), AT.astype(np_dtype))
            else:
                self._by_dtype[dtype] = (_torch_csr(A, self.device, dtype), _torch_csr(AT, self.device, dtype))
        return self._by_dtype[dtype]

    def _threaded(self, dtype: torch.dtype):
        """The scipy backend's (A, A^T) as torch CSR tensors on the same memory (no copy)."""
        key = ("threaded", dtype)
        if key not in self._by_dtype:
            self._by_dtype[key] = tuple(
                _csr_tensor(*(torch.from_numpy(a) for a in (M.indptr, M.indices, M.data)), M.shape)
                for M in self.matrices(dtype)
            )
        return self._by_dtype[key]

    def m_product(self, X: torch.Tensor):
        """For each row x of X: ``M x = (I - A)^T (I - A) x`` and ``||(I - A) x||^2``."""
        MXT, bx_sq = self.m_product_columns(X.T)
        return MXT.T.contiguous(), bx_sq

    def m_product_columns(self, XT: torch.Tensor):
        """``m_product`` for the transposed N x batch block (one problem per column), the layout
        scipy's CSR kernel wants; (I - A) x stays in it between the two products. Solvers that
        keep their iterates in this layout skip two transposes per product."""
        BXT, MXT = self.products_columns(XT)
        if self.backend == "scipy":
            return MXT, torch.from_numpy(np.einsum("ij,ij->j", BXT.numpy(), BXT.numpy()))
        return MXT, torch.linalg.vecdot(BXT, BXT, dim=0)

    def products_columns(self, XT: torch.Tensor):
        """``((I - A) X, M X)`` for the N x batch block X (one problem per column)."""
        dtype = XT.dtype
        A, AT = self.matrices(dtype)
        if self.backend == "scipy":
            XT = np.ascontiguousarray(XT.numpy())
            if torch.get_num_threads() > 1:
                # scipy's kernel runs on one thread; torch's CSR kernel splits the rows over
                # torch's threads and adds each row's terms in the same order, so the bits are
                # scipy's (tests/test_graphmax.py), 1.1-1.9x as fast on 2 threads
                # (benchmarks/graph_products.py).
                A, AT = self._threaded(dtype)
                BXT = (A @ torch.from_numpy(XT)).numpy()
                np.subtract(XT, BXT, out=BXT)
                MXT = (AT @ torch.from_numpy(BXT)).numpy()
            else:
                BXT = A @ XT
                np.subtract(XT, BXT, out=BXT)
                MXT = AT @ BXT
            np.subtract(BXT, MXT, out=MXT)
            return torch.from_numpy(BXT), torch.from_numpy(MXT)
        XT = XT.contiguous()
        BXT = XT - A @ XT
        return BXT, BXT - AT @ BXT

    def touched(self) -> torch.Tensor:
        """The ids of the tokens that some edge of the graph touches (sorted, on the device)."""
        if "touched" not in self._by_dtype:
            A = self._scipy["A"]
            ids = np.union1d(np.flatnonzero(np.diff(A.indptr)), A.indices)
            self._by_dtype["touched"] = torch.from_numpy(ids.astype(np.int64)).to(self.device)
        return self._by_dtype["touched"]

    def untouched(self) -> torch.Tensor:
        """The ids of the tokens that no edge of the graph touches (sorted, on the device)."""
        if "untouched" not in self._by_dtype:
            ids = np.setdiff1d(np.arange(self.n), self.touched().cpu().numpy())
            self._by_dtype["untouched"] = torch.from_numpy(ids.astype(np.int64)).to(self.device)
        return self._by_dtype["untouched"]

    def touched_operator(self) -> GraphOperator:
        """The operator of the graph restricted to its touched tokens (it holds every edge)."""
        if "touched_op" not in self._by_dtype:
            ids = self.touched().cpu().numpy()
            A = self._scipy["A"][ids][:, ids].tocsr()
            self._by_dtype["touched_op"] = GraphOperator(A, A.T.tocsr(), device=self.device, backend=self.backend)
        return self._by_dtype["touched_op"]

    def diag_m(self, dtype: torch.dtype) -> torch.Tensor:
        """diag((I - A)^T (I - A))_i = 1 - 2 A_ii + sum_k A_ki^2, on the device."""
        if self._diag_m is None:
            A, AT = self._scipy["A"], self._scipy["AT"]
            col_sq = np.asarray(AT.multiply(AT).sum(axis=1)).ravel()
            self._diag_m = torch.from_numpy(1.0 - 2.0 * A.diagonal() + col_sq).to(self.device)
        return self._diag_m.to(dtype)

    def hubs(self, dtype: torch.dtype):
        """The graph's hubs, its ``graphmax_presolve.HUB_TOKENS`` tokens with the most
        predecessors (all tokens of a smaller graph), and M among them: (position of each
        token among the hubs or -1, dense ``M[S, S]``), on the device. Computed once (about
        0.3 s for 2,048 hubs of the food-reviews graph, 0.8 s of the movie-reviews one)."""
        key = ("hubs", dtype)
        if key not in self._by_dtype:
            A, AT = self._scipy["A"], self._scipy["AT"]
            in_degree = np.diff(AT.indptr)
            S = np.sort(np.argsort(-in_degree, kind="stable")[: graphmax_presolve.HUB_TOKENS])
            A_SS = A[S][:, S].toarray()
            AT_S = AT[S]
            # M = I - A - A^T + A^T A, and (A^T A)_ij is the dot product of the rows i, j of A^T
            M_SS = np.eye(len(S)) - A_SS - A_SS.T + (AT_S @ AT_S.T).toarray()
            pos = np.full(self.n, -1, dtype=np.int64)
            pos[S] = np.arange(len(S))
            self._by_dtype[key] = (torch.from_numpy(pos).to(self.device), torch.from_numpy(M_SS).to(self.device, dtype))
        return self._by_dtype[key]

    def hub_block(self, H: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """For token ids H (K x batch), the batch x K x K matrices ``M[H_b, H_b]`` with the
        entries between two non-hubs, or a hub and a non-hub, left out (the diagonal is exact):
        the part of M that couples a column's likeliest tokens, for graphmax_presolve."""
        pos, M_SS = self.hubs(dtype)
        return graphmax_presolve.hub_block(pos[H], M_SS, self.diag_m(dtype)[H])

    def restrict(self, support: torch.Tensor, dtype: torch.dtype) -> _RestrictedOperator:
        return _RestrictedOperator(self, support, dtype)


class _RestrictedOperator:
    """``B[:, S] = I[:, S] - A[:, S]`` and its transpose for x living on the token set S.

    ``||(I - A) x||^2`` sums over every row of the graph, so all rows of ``A[:, S]`` are kept;
    only the rows P that can be nonzero (S and the predecessors of S) are stored, which makes
    the products |P| instead of N wide without changing them."""

    def __init__(self, full: GraphOperator, support: torch.Tensor, dtype: torch.dtype):
        self.full = full
        self.n = int(support.numel())
        self.support = support.to(full.device)
        A, AT = full.matrices(dtype)
        if full.backend == "scipy":
            S = support.cpu().numpy()
            ATS = AT[S, :]  # |S| x N: row s lists the predecessors of s
            P = np.union1d(S, ATS.indices)
            self.ATS = ATS[:, P].tocsr()  # |S| x |P|
            self.AS = self.ATS.T.tocsr()  # |P| x |S|
            self.pos = torch.from_numpy(np.searchsorted(P, S))
        else:
            S = support.to(full.device)
            ATS = _torch_csr_rows(AT, S)
            P = torch.unique(torch.cat([S, ATS.col_indices()]))
            lookup = torch.full((full.n,), -1, dtype=torch.long, device=full.device)
            lookup[P] = torch.arange(P.numel(), device=full.device)
            self.ATS = _csr_tensor(ATS.crow_indices(), lookup[ATS.col_indices()], ATS.values(), (S.numel(), P.numel()))
            self.AS = _torch_csr_transpose(self.ATS)
            self.pos = lookup[S]

    def diag_m(self, dtype: torch.dtype) -> torch.Tensor:
        return self.full.diag_m(dtype)[self.support]

    def m_product(self, XS: torch.Tensor):
        """``M_S x_S`` with ``M_S = (I - A)[:, S]^T (I - A)[:, S]``, and ``||(I - A)[:, S] x_S||^2``."""
        MXT, bx_sq = self.m_product_columns(XS.T)
        return MXT.T.contiguous(), bx_sq

    def m_product_columns(self, XT: torch.Tensor):
        """``m_product`` for the transposed |S| x batch block (one problem per column)."""
        if self.full.backend == "scipy":
            XT = np.ascontiguousarray(XT.numpy())
            BXT = self.AS @ XT
            np.negative(BXT, out=BXT)
            BXT[self.pos.numpy()] += XT
            MXT = BXT[self.pos.numpy()] - self.ATS @ BXT
            return torch.from_numpy(MXT), torch.from_numpy(np.einsum("ij,ij->j", BXT, BXT))
        XT = XT.contiguous()
        BXT = -(self.AS @ XT)
        BXT[self.pos] += XT
        MXT = BXT[self.pos] - self.ATS @ BXT
        return MXT, torch.linalg.vecdot(BXT, BXT, dim=0)


def _torch_csr_rows(csr: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    crow, col, val = csr.crow_indices(), csr.col_indices(), csr.values()
    starts, counts = crow[rows], crow[rows + 1] - crow[rows]
    new_crow = torch.zeros(rows.numel() + 1, dtype=crow.dtype, device=crow.device)
    new_crow[1:] = counts.cumsum(0)
    total = int(new_crow[-1])
    offset_in_row = torch.arange(total, device=crow.device) - torch.repeat_interleave(new_crow[:-1], counts)
    take = torch.repeat_interleave(starts, counts) + offset_in_row
    return _csr_tensor(new_crow, col[take], val[take], (rows.numel(), csr.shape[1]))


def _torch_csr_transpose(csr: torch.Tensor) -> torch.Tensor:
    crow, col = csr.crow_indices(), csr.col_indices()
    row = torch.repeat_interleave(torch.arange(csr.shape[0], device=crow.device), crow[1:] - crow[:-1])
    coo = torch.sparse_coo_tensor(
        torch.stack([col, row]), csr.values(), size=(csr.shape[1], csr.shape[0]), check_invariants=False
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return coo.coalesce().to_sparse_csr()


# --------------------------------------------------------------------------------------
# Solvers on batch x N blocks (one row per problem)
# --------------------------------------------------------------------------------------


@dataclass
class GraphmaxInfo:
    """What a graphmax call computed, one entry per row of z (0-d tensors for 1-d z)."""

    solver: str
    iterations: torch.Tensor  # fixed-point (exact) or projected-gradient (paper) steps taken
    gap: torch.Tensor  # certified duality gap f(x) + g(u) of the returned x (>= f(x) - f*)
    relative_gap: torch.Tensor  # gap / max(1, |f(x)|) with f taken at the max-shifted scores
    objective: torch.Tensor  # f(x) at the scores as given
    converged: torch.Tensor  # exact: relative gap <= tol; paper: the step-size stop rule met
    log_probs: torch.Tensor  # log x in z's shape and compute dtype (-inf where x is exactly 0)
    support: torch.Tensor | None = None  # token ids the top-k restriction kept (None: all)


def _vecdot(a: torch.Tensor, b: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.linalg.vecdot(a, b, dim=dim)


def _columns(T: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """The columns ``cols`` of an N x batch block as a contiguous block: the same values as
    ``T[:, cols]``, which torch gathers 3-5x slower (measured at N = 49,152, 5-40 columns)."""
    return torch.index_select(T, 1, cols)


# The solver keeps one problem per column (N x batch): the layout scipy's CSR products want,
# so that no iterate is transposed (a transpose of a 48 x 49k block costs as much as an
# exponential over it). Sums over tokens are sums over dim 0.


def _kl_gap(X: torch.Tensor, D: torch.Tensor, first: torch.Tensor, logX_of, light=None) -> torch.Tensor:
    """``log sum_i x_i e^{d_i} - sum_i x_i d_i`` per column, with d the centred logit residual
    ``r - <x, r>`` and ``first = <x, d>``: the duality gap (r is ``z - 2 lam M x - log x`` up to
    a per-column constant, to which it is invariant).

    Centring r and using expm1 keeps the result accurate when the gap is far below the
    rounding error of numbers of size 1 (needed to certify and to compare iterates there):
    the two sums then cancel only the rounding error of the centre.

    ``light``: (mass, centre) of the tokens outside the block, whose residual is 0 (d = -centre)."""
    terms = _vecdot(X, torch.expm1(D), dim=0)
    if light is not None:
        terms = terms + light[0] * torch.expm1(-light[1])
    gap = torch.log1p(terms) - first
    overflow = ~torch.isfinite(gap)
    if bool(overflow.any()):  # only far from the optimum: take the plain log-sum-exp there
        cols = overflow.nonzero().flatten()
        lse = torch.logsumexp(logX_of(cols) + _columns(D, cols), dim=0)
        if light is not None:
            lse = torch.logaddexp(lse, light[0][cols].log() - light[1][cols])
        gap[cols] = lse - first[cols]
    return gap.clamp_min(0.0)


def _redo_off_range(YT: torch.Tensor, X: torch.Tensor, s: torch.Tensor, shift: torch.Tensor):
    """A column whose sum s of ``exp(y - shift)`` left [1e-10, 1e10] (a long step, or the
    first one) is exponentiated again at its maximum: X and s are updated in place; returns
    (s, the shifts used)."""
    off = ~((s >= 1e-10) & (s <= 1e10))
    if bool(off.any()):
        cols = off.nonzero().flatten()
        Yc = _columns(YT, cols)
        m = Yc.amax(0)
        Xc = torch.sub(Yc, m).exp_()
        X.index_copy_(1, cols, Xc)
        shift = shift.clone()
        shift[cols] = m
        s[cols] = Xc.sum(0).to(s.dtype)
    return s, shift


def _softmax_columns(YT: torch.Tensor, shift: torch.Tensor, light=None):
    """softmax of each column of YT and its log-sum-exp, exponentiating ``y - shift``; with
    ``light`` (graphmax_isolated.LightTokens) the block's share of the softmax over all tokens,
    its normaliser, and the light tokens' mass, sum of squares and whether the normaliser is
    within the series' reach (else None, None, None).

    ``shift`` is the log-sum-exp of the previous iterate (a step moves y little), which saves
    the pass that finds each column's maximum; a column whose sum leaves [1e-10, 1e10] (a
    long step, or the first one) is redone with its maximum."""
    X = torch.sub(YT, shift).exp_()
    s, shift = _redo_off_range(YT, X, X.sum(0), shift)
    if light is None:
        X.div_(s)
        return X, shift + s.log(), None, None, None
    v, c, mass, squares, ok = light.normalise(s, shift)
    X.mul_(v.to(X.dtype))
    return X, c.to(X.dtype), mass.to(X.dtype), squares.to(X.dtype), ok


def _evaluate(YT, ZT, op, lam, curvature, shift, tol=None, light=None, residual=False):
    """At x = softmax(y), per column: the next step's direction, the duality gap, whether that
    gap is exact, f(x), log sum exp(y), the rounding error of f (in units of the dtype's
    epsilon: f is a sum of terms that can be much larger than f itself, lam ||Bx||^2 in
    particular) and whether the light tokens' series still holds (None without ``light``).

    With ``light`` (graphmax_isolated.LightTokens) YT holds the block's tokens only and the
    light isolated tokens sit at their conditional optimum: residual 0, mass and sum of
    squares in closed form; the gap and f are still those of the full problem.

    The direction is the logit residual ``r = z - 2 lam M x - y`` itself when curvature is
    None, else ``(r - <x, r>) / (1 + curvature * x)``.

    ``residual``: also return the logit residual r itself (for graphmax_presolve).

    With ``tol`` the exact gap (an expm1 over the block, the costliest pass) is computed only
    for the columns that could be within ``tol``; the others get a lower bound on it, from
    ``e^d >= 1 + d + d^2/2 + d^3/6`` (true for every real d):
    ``gap >= log(1 + <x, d> + <x, d^2>/2 + <x, d^3>/6) - <x, d>``. A column whose bound
    exceeds ``tol`` (relative, with a factor 2 for rounding) cannot have converged, so the
    stopping decisions are the ones the exact gaps would give."""
    X, lse, mass, squares, ok = _softmax_columns(YT, shift, light)
    MX, bx_sq = op.m_product_columns(X)
    if light is not None:
        bx_sq = bx_sq + squares
    R = torch.sub(ZT, YT).add_(MX, alpha=-2.0 * lam)
    del MX
    plain = R.clone() if curvature is None or residual else None
    centre = _vecdot(X, R, dim=0)
    D = R.sub_(centre)
    XD = torch.mul(X, D)
    first = XD.sum(0)
    outside = None if light is None else (mass, centre)
    if light is not None:
        first = first - mass * centre
    # f = <x, y - lse - z> + lam ||Bx||^2 and <x, r> = <x, z - y> - 2 lam ||Bx||^2 (as <x, Mx>
    # = ||Bx||^2), so f = -<x, r> - lam ||Bx||^2 - lse without another pass over x.
    f = -(centre + first) - lam * bx_sq - lse
    f_error = (centre.abs() + first.abs() + lam * bx_sq + lse.abs() + 1.0) * (64 * torch.finfo(YT.dtype).eps)
    exact = torch.ones_like(first, dtype=torch.bool)
    gap = None
    if tol is not None:
        m2 = XD.mul_(D).sum(0)
        m3 = XD.mul_(D).sum(0)
        if light is not None:
            m2, m3 = m2 + mass * centre**2, m3 - mass * centre**3
        moments = first + 0.5 * m2 + m3 / 6.0
        lower = torch.where(moments > -1.0, torch.log1p(moments.clamp_min(-0.5)) - first, 0.0).clamp_min(0.0)
        exact = lower <= (2.0 * tol) * f.abs().clamp_min(1.0)
        if not bool(exact.all()):
            gap = lower
            cols = exact.nonzero().flatten()
            if cols.numel():
                Xc, Dc, lse_c = _columns(X, cols), _columns(D, cols), lse[cols]
                part = None if light is None else (mass[cols], centre[cols])
                gap[cols] = _kl_gap(Xc, Dc, first[cols], lambda c: _columns(YT, cols[c]) - lse_c[c], part)
    del XD
    if gap is None:
        gap = _kl_gap(X, D, first, lambda cols: _columns(YT, cols) - lse[cols], outside)
    direction = plain if curvature is None else D.div_(X.mul_(curvature).add_(1.0))
    if light is not None and curvature is not None:
        # The full step would move the light tokens by -theta <x, r> / (1 + 2 lam x_k), about
        # -theta <x, r>; they re-solve in closed form instead, so the block takes that shift
        # with the opposite sign (x is invariant to a common shift of y). Without it the
        # block's level relative to the light tokens would never settle: r = <x, r> != 0 on
        # the block would be a fixed point.
        direction.add_(centre)
    out = (direction, gap, exact, f, lse, f_error, ok)
    return (*out, plain) if residual else out


def _evaluate_kernels(K, YT, step, ZT, op, lam, curvature, shift, tol, light=None, residual=False):
    """``_evaluate`` in the CPU kernels (``maxbench.systems.layers.graphmax.kernels.exact``, float32), at
    ``y = YT + direction * theta`` for ``step = (direction, theta)``, else at YT; returns
    (y, then ``_evaluate``'s results). The kernels' e^d - 1 costs no extra pass, so every
    column's gap is the exact one but where some d is too large for float32's exponential."""
    n, b = YT.shape
    nch = K.chunks(n)
    part = np.empty((nch, b), dtype=np.float64)
    X = torch.empty_like(YT)
    if step is None:
        Y, D, theta = YT, np.empty((0, b), dtype=np.float32), np.empty(b, dtype=np.float32)
    else:
        Y, D, theta = torch.empty_like(YT), step[0].numpy(), step[1].numpy()
    K.step_softmax(YT.numpy(), D, theta, shift.numpy(), Y.numpy(), X.numpy(), part)
    s, shift = _redo_off_range(Y, X, torch.from_numpy(K.total(part)), shift)
    if light is None:
        v, lse, mass, squares, ok = 1.0 / s, shift.double() + s.log(), None, None, None
    else:
        v, lse, mass, squares, ok = light.normalise(s, shift)
    # the product of the unnormalised x, scaled by v in the residual's pass
    # and ||(I - A) x||^2 as chunk sums in float64 whichever product ran
    PK = cpu_kernels.load("paper")
    if isinstance(op, graphmax_isolated.IsolatedBlock):
        # the kernels' product where the block is wide (the same bits either way)
        MX, bx_sq = op.touched_product(X, PK, b >= _KERNEL_PRODUCT_WIDTH)
    else:
        BX, MX = op.products_columns(X)
        bx_sq = torch.from_numpy(graphmax_isolated.squares(PK, BX.numpy()))
        del BX
    bx_sq = bx_sq * v**2
    if squares is not None:
        bx_sq = bx_sq + squares
    R = torch.empty_like(YT)
    K.residual(
        X.numpy(),
        v.float().numpy(),
        ZT.numpy(),
        Y.numpy(),
        MX.numpy(),
        (2.0 * lam * v).float().numpy(),
        R.numpy(),
        part,
    )
    centre = torch.from_numpy(K.total(part))
    del MX
    sums = np.empty((nch, 3, b), dtype=np.float64)
    direction = torch.empty_like(YT)
    # with light tokens the block takes the light tokens' shift of the full step (see _evaluate)
    level = centre if light is not None else torch.zeros_like(centre)
    K.direction(
        X.numpy(),
        R.numpy(),
        centre.float().numpy(),
        curvature[:, 0].contiguous().numpy(),
        level.float().numpy(),
        direction.numpy(),
        sums,
    )
    first, terms = (torch.from_numpy(t) for t in K.total(sums[:, :2]))
    top = torch.from_numpy(sums[:, 2].max(0))
    if light is not None:
        first = first - mass * centre
        terms = terms + mass * torch.expm1(-centre)
    gap = (torch.log1p(terms) - first).clamp_min(0.0)
    f = -(centre + first) - lam * bx_sq - lse
    eps = torch.finfo(YT.dtype).eps
    f_error = (centre.abs() + first.abs() + lam * bx_sq + lse.abs() + 1.0) * (64 * eps)
    # The kernel takes e^min(d, CLAMP) - 1 (e^d overflows float32 above 88.7): where some d
    # exceeds CLAMP (far from the optimum: a first step) the gap is a lower bound, exact only
    # where it could be within tol, by the plain log-sum-exp.
    exact = top <= K.CLAMP
    if not bool(exact.all()):
        cols = (~exact & (gap <= (2.0 * tol) * f.abs().clamp_min(1.0))).nonzero().flatten()
        if cols.numel():
            D = _columns(R, cols).sub_(centre[cols].float())
            lse_c = torch.logsumexp((_columns(Y, cols) - lse[cols].float() + D).double(), dim=0)
            if light is not None:
                lse_c = torch.logaddexp(lse_c, mass[cols].log() - centre[cols])
            gap[cols] = (lse_c - first[cols]).clamp_min(0.0)
            exact[cols] = True
    dt = YT.dtype
    out = (Y, direction, gap.to(dt), exact, f.to(dt), lse.to(dt), f_error.to(dt), ok)
    return (*out, R) if residual else out


def _solve_exact(ZT, op, lam, tol, max_iter, theta0, safeguard, presolve=True, rows=None, K=None):
    """Fixed point of y = z - 2 lam M softmax(y) on the columns of ZT (N x batch, one problem
    per column) from y = z; returns (log x, gap, f, steps, converged), log x with one row per
    problem (batch x N). ``rows``: (Z, shift), the same scores with one problem per row before
    the max-shift (``ZT = (Z - shift)^T``), where the caller has them.

    On a graph that leaves most tokens untouched, the iteration runs on the touched and the
    heavy isolated tokens only, with the light ones in closed form
    (maxbench.systems.layers.graphmax.isolated); a problem whose normaliser leaves the closed form's
    reach is solved again on all tokens."""
    split = graphmax_isolated.split(ZT, op, lam, K) if isinstance(op, GraphOperator) else None
    if split is None:
        logXT, gap, f, steps, conv, _, _ = _iterate_exact(
            ZT, op, lam, tol, max_iter, theta0, safeguard, presolve, None, K
        )
        return logXT.T.contiguous(), gap, f, steps, conv
    block, block_op, light = split
    logXT_block, gap, f, steps, conv, lse, ok = _iterate_exact(
        torch.index_select(ZT, 0, block), block_op, lam, tol, max_iter, theta0, safeguard, presolve, light, K
    )
    # the light tokens' log x straight in the rows' layout (one transpose of the block only)
    Z, shift = rows if rows is not None else (ZT.T, ZT.new_zeros(ZT.shape[1]))
    logX = light.log_probs(Z, lse + shift, K)
    if K is not None:
        K.scatter_transpose(logXT_block.numpy(), block.numpy(), logX.numpy())
    else:
        logX.index_copy_(1, block, logXT_block.T.contiguous())
    redo = (~ok).nonzero().flatten()
    if redo.numel():
        logXT_r, gap_r, f_r, steps_r, conv_r, _, _ = _iterate_exact(
            _columns(ZT, redo), op, lam, tol, max_iter, theta0, safeguard, presolve, None, K
        )
        logX.index_copy_(0, redo, logXT_r.T)
        gap[redo], f[redo], steps[redo], conv[redo] = gap_r, f_r, steps_r, conv_r
    return logX, gap, f, steps, conv


def _iterate_exact(ZT, op, lam, tol, max_iter, theta0, safeguard, presolve=True, light=None, kernels=None):
    """The iteration of ``_solve_exact`` on the rows of ZT (all tokens, or with ``light`` the
    block's tokens); returns (log x as ZT's rows x batch, gap, f, steps, converged, log-sum-exp,
    the light tokens' series held at every evaluation).

    With ``safeguard`` (the default) each step is
    ``y += theta * (r - <x, r>) / (1 + 2 lam diag(M) x)`` with r the logit residual: the step
    of entropic mirror descent on f, scaled per token by the diagonal of the fixed point's
    Jacobian ``I + 2 lam M diag(x)`` (frequent tokens with large ``M_ii`` would otherwise
    overshoot and oscillate). A step that increases f(x) is taken back and the row's theta
    halved; an accepted one lets theta grow by 1.5 up to 0.85. Centring r matters once the
    scaling differs between tokens: a constant in r would no longer cancel.
    Without ``safeguard``: the plain damped iteration ``y += theta0 * r`` (for comparison).

    A problem's results are stored when it is done, and done problems leave the working block
    in groups (``COMPACT``), so the block shrinks and the batch does not wait for its slowest
    row at full width. ``kernels``: the module ``exact_kernels`` (float32 on the CPU), else
    torch's operations."""
    n, batch = ZT.shape
    device = ZT.device
    out_gap, out_f, out_lse = ZT.new_empty(batch), ZT.new_empty(batch), ZT.new_empty(batch)
    out_steps = torch.zeros(batch, dtype=torch.long, device=device)
    out_conv = torch.zeros(batch, dtype=torch.bool, device=device)
    out_ok = torch.ones(batch, dtype=torch.bool, device=device)
    # log x of the finished problems, one per column in the original order
    out_logXT = ZT.new_empty(n, batch)
    idx = torch.arange(batch, device=device)
    curvature = ((2.0 * lam) * op.diag_m(ZT.dtype))[:, None] if safeguard else None
    YT = ZT  # never written in place
    # graphmax() max-shifts the scores, so 0 is the right shift (any other is corrected)
    shift = ZT.new_zeros(batch)
    # The first step is graphmax_presolve's (Newton's method on each problem's likeliest
    # tokens), with theta 1; a problem where it increases f takes the plain first step instead.
    first = safeguard and presolve and hasattr(op, "hub_block")
    if kernels is not None:
        evaluation = _evaluate_kernels(kernels, YT, None, ZT, op, lam, curvature, shift, tol, light, residual=first)[1:]
    else:
        evaluation = _evaluate(YT, ZT, op, lam, curvature, shift, tol, light, residual=first)
    direction, gap, exact, f, lse, f_error, ok = evaluation[:7]
    ok = torch.ones_like(exact) if ok is None else ok
    theta = ZT.new_full((batch,), float(theta0))
    if first:
        regular = direction
        direction = graphmax_presolve.first_step(ZT, evaluation[7], lse, op, lam)
        theta.fill_(1.0)
        del evaluation
    steps = torch.zeros(batch, dtype=torch.long, device=device)
    # finished problems whose results are stored; they leave the block in groups (below)
    stored = torch.zeros(batch, dtype=torch.bool, device=device)
    while True:
        conv = exact & (gap <= tol * f.abs().clamp_min(1.0))
        done = (conv | (steps >= max_iter)) & ~stored
        if bool(done.any()):
            cols = done.nonzero().flatten()
            bound_only = cols[~exact[cols]]
            if bound_only.numel():  # out of steps with only a bound: certify what is returned
                part = None if light is None else light.columns(bound_only)
                _, gap_b, _, f_b, _, _, _ = _evaluate(
                    _columns(YT, bound_only), _columns(ZT, bound_only), op, lam, curvature, lse[bound_only], None, part
                )
                gap[bound_only], f[bound_only] = gap_b, f_b
                conv[bound_only] = gap_b <= tol * f_b.abs().clamp_min(1.0)
            rows = idx[cols]
            if rows.numel() == batch:  # all at once: no gather, no scatter
                torch.sub(YT, lse, out=out_logXT)
            else:
                out_logXT.index_copy_(1, rows, _columns(YT, cols).sub_(lse[cols]))
            out_gap[rows], out_f[rows], out_lse[rows] = gap[cols], f[cols], lse[cols]
            out_steps[rows], out_conv[rows], out_ok[rows] = steps[cols], conv[cols], ok[cols]
            stored |= done
        if bool(stored.all()):
            break
        # Done problems leave the block once they are an eighth of it (COMPACT); until then they
        # take steps whose results are not used (the problems are independent).
        if COMPACT * int(stored.sum()) >= stored.numel():
            keep = (~stored).nonzero().flatten()
            idx, gap, exact, f, lse, f_error, theta, steps, ok, stored = (
                t[keep] for t in (idx, gap, exact, f, lse, f_error, theta, steps, ok, stored)
            )
            YT, direction, ZT = (torch.index_select(t, 1, keep) for t in (YT, direction, ZT))
            if first:
                regular = torch.index_select(regular, 1, keep)
            light = None if light is None else light.columns(keep)
        if kernels is not None:
            Y_try, direction_try, gap_try, exact_try, f_try, lse_try, f_error_try, ok_try = _evaluate_kernels(
                kernels, YT, (direction, theta), ZT, op, lam, curvature, lse, tol, light
            )
        else:
            Y_try = torch.addcmul(YT, direction, theta)
            direction_try, gap_try, exact_try, f_try, lse_try, f_error_try, ok_try = _evaluate(
                Y_try, ZT, op, lam, curvature, lse, tol, light
            )
        if ok_try is not None:
            ok = ok & ok_try
        steps += 1
        if safeguard:
            # Only an increase of f beyond rounding counts: near the optimum the changes of f
            # fall below its rounding error, and rejecting steps there on noise would stall.
            worse = f_try > f + torch.maximum(f_error, f_error_try)
            if bool(worse.any()):  # take the step back for those rows (both blocks are new: copy in place)
                back = worse.nonzero().flatten()
                Y_try.index_copy_(1, back, _columns(YT, back))
                direction_try.index_copy_(1, back, _columns(regular if first else direction, back))
                gap_try, exact_try, f_try, lse_try, f_error_try = (
                    torch.where(worse, old, new)
                    for new, old in (
                        (gap_try, gap),
                        (exact_try, exact),
                        (f_try, f),
                        (lse_try, lse),
                        (f_error_try, f_error),
                    )
                )
            theta = torch.where(worse, theta0 if first else theta * 0.5, (theta * 1.5).clamp_max(_THETA_MAX))
        if first:
            first, regular = False, None
        YT, direction, gap, exact, f, lse, f_error = (
            Y_try,
            direction_try,
            gap_try,
            exact_try,
            f_try,
            lse_try,
            f_error_try,
        )
    return out_logXT, out_gap, out_f, out_steps, out_conv, out_lse, out_ok


def _certify(X, Z, op, lam):
    """Duality gap and f(x) of the full problem for a feasible x on all N tokens that may
    have exact zeros (0 log 0 = 0)."""
    MX, bx_sq = op.m_product(X)
    V = Z - (2.0 * lam) * MX
    x_log_x = torch.special.xlogy(X, X)
    f = (x_log_x - X * Z).sum(-1) + lam * bx_sq
    gap = (x_log_x - X * V).sum(-1) + torch.logsumexp(V, dim=-1)
    return gap.clamp_min(0.0), f


# --------------------------------------------------------------------------------------
# Implicit backward for the exact solution
# --------------------------------------------------------------------------------------


def _batched_cg(apply_K, rhs, tol=1e-12, max_iter=1000):
    """Conjugate gradients for K w = rhs, one independent SPD system per row."""
    W = torch.zeros_like(rhs)
    R = rhs.clone()
    P = R.clone()
    rs = _vecdot(R, R)
    target = (tol**2) * rs
    for _ in range(max_iter):
        if bool((rs <= target).all()):
            break
        KP = apply_K(P)
        pKp = _vecdot(P, KP)
        step = torch.where(pKp > 0, rs / torch.where(pKp > 0, pKp, torch.ones_like(pKp)), torch.zeros_like(rs))
        W += step[:, None] * P
        R -= step[:, None] * KP
        rs_next = _vecdot(R, R)
        beta = torch.where(rs > 0, rs_next / torch.where(rs > 0, rs, torch.ones_like(rs)), torch.zeros_like(rs))
        P = R + beta[:, None] * P
        rs = rs_next
    return W


def _implicit_vjp(X, G, op, lam):
    s = X.sqrt()

    def proj(V):  # I - s s^T (s has unit norm because x sums to 1)
        return V - s * _vecdot(s, V)[:, None]

    def apply_K(V):
        return V + (2.0 * lam) * proj(s * op.m_product(s * proj(V))[0])

    return s * proj(_batched_cg(apply_K, proj(s * G)))


class _ImplicitGraphmax(torch.autograd.Function):
    """Identity on the (already solved) probabilities; the backward differentiates the fixed
    point ``x = softmax(z - 2 lam M x)`` implicitly."""

    @staticmethod
    def forward(ctx, z, x, op, lam):  # z, x: batch x n, one problem per row
        ctx.save_for_backward(x)
        ctx.op, ctx.lam = op, lam
        return x.clone()

    @staticmethod
    def backward(ctx, grad_x):
        (x,) = ctx.saved_tensors
        with torch.no_grad():
            grad_z = _implicit_vjp(x, grad_x.to(x.dtype), ctx.op, ctx.lam)
        return grad_z, None, None, None


# --------------------------------------------------------------------------------------
# Public operator
# --------------------------------------------------------------------------------------


def check_graphmax_args(
    lam: float = 1.0,
    solver: str = "exact",
    tol: float = 1e-6,
    max_iter: int = 100,
    topk: int | None = None,
    theta0: float = 0.7,
    alpha: float = 1e-4,
    T: int = 20,
) -> None:
    """Check the options of :func:`graphmax` (same names and defaults) before any scores exist.

    The output layer calls it when it is built, so a bad system string fails before a model
    loads; :func:`graphmax` calls it on every call.

    Raises
    ------
    MaxbenchError
        One line naming the first bad option and what it accepts.
    """
    if solver not in SOLVERS:
        raise MaxbenchError(f"graphmax: unknown solver '{solver}'; use one of {', '.join(SOLVERS)}")
    if not isinstance(lam, (int, float)) or isinstance(lam, bool) or not math.isfinite(lam) or lam < 0:
        raise MaxbenchError(f"graphmax: lam must be a finite number >= 0, got {lam!r}")
    if not (isinstance(tol, (int, float)) and tol >= 0):
        raise MaxbenchError(f"graphmax: tol must be >= 0, got {tol!r}")
    if not (isinstance(max_iter, int) and max_iter >= 0):
        raise MaxbenchError(f"graphmax: max_iter must be an integer >= 0, got {max_iter!r}")
    if topk is not None and not (isinstance(topk, int) and topk >= 1):
        raise MaxbenchError(f"graphmax: topk must be a positive integer or None, got {topk!r}")
    if topk is not None and solver == "paper":
        raise MaxbenchError("graphmax: topk applies to solver='exact' only (the paper's algorithm uses all tokens)")
    if not 0 < theta0 <= 1:
        raise MaxbenchError(f"graphmax: theta0 must be in (0, 1], got {theta0!r}")
    if not (alpha > 0 and isinstance(T, int) and T >= 1):
        raise MaxbenchError(f"graphmax: the paper solver needs alpha > 0 and an integer T >= 1, got {alpha!r}, {T!r}")


def _check_scores(z: torch.Tensor) -> None:
    if z.dim() not in (1, 2) or z.shape[-1] == 0:
        raise MaxbenchError(f"graphmax: z must have shape (N,) or (B, N), got {tuple(z.shape)}")
    if not all_finite(z):
        bad = (~torch.isfinite(z.reshape(-1, z.shape[-1]))).any(-1).nonzero().flatten().tolist()
        raise MaxbenchError(
            f"graphmax: the scores contain NaN or infinite values (rows {bad[:8]}); graphmax needs finite scores"
        )


def graphmax(
    z,
    A,
    lam: float = 1.0,
    solver: str = "exact",
    *,
    tol: float = 1e-6,
    max_iter: int = 100,
    topk: int | None = None,
    theta0: float = 0.7,
    safeguard: bool = True,
    presolve: bool = True,
    alpha: float = 1e-4,
    T: int = 20,
    paper_stop: float = 1e-4,
    log_floor: float = 1e-10,
    backend: str | None = None,
    return_info: bool = False,
    probs: bool = True,
):
    """Graph-regularised softmax: argmin over the simplex of -<x, z> + <x, log x> + lam ||x - A x||^2.

    Parameters
    ----------
    z : torch.Tensor or array-like
        Scores, shape (N,) or (B, N), finite. Integer scores are taken as the default float
        dtype. Differentiable with ``solver="exact"`` (implicit backward, see the module docstring).
    A : graph
        The row-normalised N x N graph: a scipy sparse matrix, a torch (sparse) tensor, a
        :class:`maxbench.systems.graph.CorpusGraph` or a :class:`GraphOperator` (prepare one with
        ``GraphOperator.prepare(A, device)`` to reuse it across calls).
    lam : float
        Weight of the graph total variation, finite and >= 0; 0 gives softmax.
    solver : {"exact", "paper"}
        "exact": the certified fixed point; "paper": the paper's Algorithm 1 as printed, which
        does not reach the optimum (module docstring).
    tol : float
        exact: a row stops when its relative duality gap is <= tol (>= 0).
    max_iter : int
        exact: at most this many steps per row, rejected steps included (>= 0).
    topk : int, optional
        exact: restrict the support to the union over the batch of each row's ``topk`` largest
        scores (>= 1); the reported gap stays that of the full problem.
    theta0 : float
        exact: the first step size of each row, in (0, 1].
    safeguard : bool
        exact: take back steps that increase the objective and halve that row's step; False
        runs the plain damped iteration with step ``theta0``.
    presolve : bool
        exact, with ``safeguard``: take the first step by Newton's method on each row's
        likeliest tokens (``maxbench.systems.layers.graphmax.presolve``); False starts with the plain
        step, for comparison.
    alpha : float
        paper: the gradient step size (> 0).
    T : int
        paper: the iteration bound of Algorithm 1 (T - 1 updates; an integer >= 1).
    paper_stop : float
        paper: stop when ||x^{t+1} - x^t||_2 falls below this.
    log_floor : float
        paper: log x is taken as log(max(x, log_floor)).
    backend : {"scipy", "torch"}, optional
        How graph products run (default: scipy on the CPU, torch on CUDA).
    return_info : bool
        Also return a :class:`GraphmaxInfo`.
    probs : bool
        False: return None in place of the probabilities when they would only be
        ``info.log_probs.exp()`` (the exact solver on all tokens, no gradient), which saves an
        exponential over the whole block for callers that need only the log-probabilities.

    Returns
    -------
    torch.Tensor
        Probabilities of z's shape on z's device and dtype (each row sums to 1). Float64 scores
        are solved in float64, all others in float32.
    GraphmaxInfo
        Only with ``return_info=True``: iterations, certified gap, objective, convergence and
        log-probabilities per row.

    Raises
    ------
    MaxbenchError
        For a bad option (:func:`check_graphmax_args`), non-finite scores, scores whose length
        is not the graph's size, or gradients asked of the paper solver.
    """
    z = z if torch.is_tensor(z) else torch.as_tensor(z)
    check_graphmax_args(lam, solver, tol, max_iter, topk, theta0, alpha, T)
    _check_scores(z)
    lam = float(lam)
    op = GraphOperator.prepare(A, z.device, backend=backend)
    if op.n != z.shape[-1]:
        raise MaxbenchError(
            f"graphmax: the scores have {z.shape[-1]} entries but the graph has {op.n} nodes; "
            f"use the graph built with this model's tokenizer"
        )
    if solver == "paper" and z.requires_grad:
        raise MaxbenchError("graphmax: solver='paper' is not differentiable; use solver='exact' for gradients")
    out_dtype = z.dtype if z.is_floating_point() else torch.get_default_dtype()
    # float64 scores are solved in float64 (certificates far below 1e-10), all others in
    # float32: half the memory traffic, and its rounding still leaves the gap accurate far
    # below the default tolerance (checked against float64 certificates of the same x).
    compute = torch.float64 if out_dtype == torch.float64 else torch.float32
    rows = z.reshape(-1, z.shape[-1])
    Z = rows.detach().to(compute)
    # x is shift-invariant, f(x) shifts with z: solving at max-shifted scores keeps the logit
    # iterates O(1) and makes the relative stopping rule independent of the shift.
    shift = Z.amax(-1, keepdim=True)
    n = Z.shape[-1]
    full_exact = solver == "exact" and (topk is None or topk >= n)
    # the exact solver's CPU kernels (maxbench.systems.layers.graphmax.kernels.exact): float32 with scipy's products
    K = None
    if full_exact and safeguard and op.backend == "scipy" and compute == torch.float32:
        K = cpu_kernels.load("exact")
    if K is not None:
        Z = Z.contiguous()
        ZT = Z.new_empty(n, Z.shape[0])
        K.shifted_transpose(Z.numpy(), shift.squeeze(-1).contiguous().numpy(), ZT.numpy())
    elif full_exact:
        # the solver wants one problem per column: shift and transpose in one pass
        ZT = torch.sub(Z.T, shift.T, out=Z.new_empty(n, Z.shape[0]))
    else:
        Z = Z - shift
    shift = shift.squeeze(-1)
    support = None
    with torch.no_grad():
        if solver == "paper":
            X, iterations, converged, certified = graphmax_paper.solve(
                Z, op, lam, float(alpha), T, float(paper_stop), float(log_floor)
            )
            logX, gap, f = certified if certified is not None else (torch.log(X), *_certify(X, Z, op, lam))
            solve_op = op
        elif topk is not None and topk < n:
            support = torch.unique(torch.topk(Z, topk, dim=-1).indices)
            solve_op = op.restrict(support, compute)
            logXS, _, _, iterations, converged = _solve_exact(
                Z[:, support].T.contiguous(), solve_op, lam, float(tol), max_iter, float(theta0), safeguard, presolve
            )
            XS = logXS.exp()
            X = torch.zeros_like(Z)
            X[:, support] = XS
            logX = torch.full_like(Z, float("-inf"))
            logX[:, support] = logXS
            gap, f = _certify(X, Z, op, lam)
        else:
            solve_op = op
            logX, gap, f, iterations, converged = _solve_exact(
                ZT, op, lam, float(tol), max_iter, float(theta0), safeguard, presolve, (Z, shift), K
            )
            stuck = (~converged).nonzero().flatten()
            if compute == torch.float32 and safeguard and max_iter > 0 and stuck.numel():
                # float32 rounding can hide f's changes from the safeguard, and a hard problem
                # then crawls (1 row in 3,072 of a movie-review decode): solve it again in float64
                Zs, shift_s = Z[stuck].double(), shift[stuck].double()
                logXs, gap_s, f_s, steps_s, conv_s = _solve_exact(
                    (Zs - shift_s[:, None]).T.contiguous(), op, lam, float(tol), max_iter, float(theta0), True, presolve
                )
                logX[stuck], gap[stuck], f[stuck] = logXs.to(compute), gap_s.to(compute), f_s.to(compute)
                iterations[stuck] += steps_s
                converged[stuck] = conv_s
            X = logX.exp() if probs or z.requires_grad else None
    if solver == "exact" and z.requires_grad:
        z_rows = rows.to(compute)
        if support is None:
            X = _ImplicitGraphmax.apply(z_rows, X, solve_op, lam)
        else:
            XS = _ImplicitGraphmax.apply(z_rows[:, support], X[:, support], solve_op, lam)
            X = torch.zeros_like(z_rows).index_copy(1, support, XS)
    out = X.reshape(z.shape).to(out_dtype) if X is not None else None
    if not return_info:
        return out
    squeeze = (lambda t: t[0]) if z.dim() == 1 else (lambda t: t)
    info = GraphmaxInfo(
        solver=solver,
        iterations=squeeze(iterations),
        gap=squeeze(gap),
        relative_gap=squeeze(gap / f.abs().clamp_min(1.0)),
        objective=squeeze(f - shift),
        converged=squeeze(converged),
        log_probs=logX.reshape(z.shape),
        support=support,
    )
    return out, info

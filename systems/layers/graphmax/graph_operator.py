"""The graph of graphmax as the operator ``M = (I - A)^T (I - A)`` on batches of rows.

``M`` is never formed: every product goes through ``A`` and ``A^T`` stored as CSR (float64,
converted once per compute dtype), applied to a whole block of problems at once, one problem
per column (N x batch), the layout scipy's CSR kernel wants. ``(I - A) x`` stays in that block
between the two products, and its squared norm (the graph term of the objective) comes with
``M x``. Backends: scipy on the CPU (numba's ``paper_kernels.product`` on the same arrays where
torch has more than one thread; it splits the rows over the threads and adds each row's terms in
scipy's order, so the bits are scipy's), torch sparse CSR on CUDA (and on the CPU where asked, so
that tests cover that code path; there its products are ``paper_kernels.product`` too).

Every CPU product adds each row's terms one after the other, in stored order, from 0, without
fused multiply-adds: scipy's kernel (compiled for plain x86-64, SSE2) and the numba kernel
(no fastmath, no contraction) give the same bits on every CPU, whatever the thread count, the
batch width or the vector width. torch's CSR kernel does not: it calls MKL's sparse product,
which gives scipy's bits on an AMD CPU but not on an Intel one, where MKL's code fuses each
multiply-add (one column) and adds in another order for blocks of columns, an order that varies
with the batch width; ``MKL_CBWR`` does not reach it. That made the thread count and the
compaction of finished problems change graphmax's bits on an Intel Xeon (issue 41), so the CPU
no longer calls it (tests/end_to_end/test_cpu_independence.py forces MKL's Intel code on any x86-64 CPU).

Besides the products: the diagonal of M (the exact solver's step scaling), the tokens some edge
touches (for the closed form of the others, ``maxbench.systems.layers.graphmax.isolated``), M
among the graph's hubs (``maxbench.systems.layers.graphmax.presolve``), and the operator of a
top-k support S, which keeps every row of ``A[:, S]``.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from maxbench.errors import MaxbenchError
from maxbench.systems.layers.graphmax import presolve as graphmax_presolve
from maxbench.systems.layers.graphmax.kernels import loader as cpu_kernels

__all__ = ["GraphOperator"]


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


def _cpu_times(indptr, indices, data, X: np.ndarray, bounds: np.ndarray | None = None) -> np.ndarray:
    """``A X`` for A in CSR arrays and a C-contiguous X on the CPU, by ``paper_kernels.product``:
    runs of rows of equal work (``bounds``, else computed) over numba's threads (torch's count),
    each row's terms in stored order (scipy's bits)."""
    kernels = cpu_kernels.load("paper")
    out = np.empty((indptr.shape[0] - 1, X.shape[1]), dtype=X.dtype)
    kernels.product(indptr, indices, data, X, kernels.row_blocks(indptr) if bounds is None else bounds, out)
    return out


def _times(M: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """``M X`` for a torch CSR matrix M and a dense X on M's device: on the CPU by
    ``paper_kernels.product`` (the same bits on every CPU), elsewhere torch's own product."""
    if X.device.type != "cpu" or (torch.is_grad_enabled() and (X.requires_grad or M.requires_grad)):
        return M @ X  # on CUDA, or for autograd through the product (no solver asks for it)
    arrays = (M.crow_indices().numpy(), M.col_indices().numpy(), M.values().numpy())
    return torch.from_numpy(_cpu_times(*arrays, np.ascontiguousarray(X.numpy())))


def _csr_tensor(crow, col, val, shape, device=None) -> torch.Tensor:
    # The index arrays come from scipy or from slicing a valid CSR tensor, so torch's
    # invariant checks would only cost time; its "beta" notice is not for our users.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, col, val, size=tuple(shape), device=device, check_invariants=False)


class GraphOperator:
    """``M = (I - A)^T (I - A)`` applied to a batch of rows (batch x N), on one device.

    Parameters
    ----------
    A : graph
        The row-normalised N x N graph: a scipy sparse matrix, a torch (sparse or dense) tensor
        or a numpy array, with finite weights.
    AT : same as A, optional
        ``A`` transposed, where the caller has it (a CorpusGraph stores both); else computed.
    device : str or torch.device
        Where the products run.
    backend : {"scipy", "torch"}, optional
        "scipy" (CPU: scipy's CSR times a dense N x batch block; with more than one torch
        thread the same arrays go through numba's ``paper_kernels.product``, which splits the
        rows over the threads and gives scipy's bits) or "torch" (torch sparse CSR; the only
        choice on CUDA, and usable on the CPU so that tests cover the CUDA code path, with the
        products by ``paper_kernels.product``). Default: scipy on the CPU, torch elsewhere. The
        matrices are kept in float64 and converted once per compute dtype.

    Raises
    ------
    MaxbenchError
        For a graph that is not square, holds non-finite weights or is of an unknown type,
        and for an unknown backend or scipy off the CPU.
    """

    def __init__(self, A, AT=None, device="cpu", backend: str | None = None):
        A = _to_scipy_csr(A)
        if A.ndim != 2 or A.shape[0] != A.shape[1]:
            raise MaxbenchError(f"graphmax: the graph must be a square N x N matrix, got shape {A.shape}")
        if not np.isfinite(A.data).all():
            raise MaxbenchError("graphmax: the graph holds NaN or infinite weights; rebuild it")
        AT = A.T.tocsr() if AT is None else _to_scipy_csr(AT)
        # one order of each row's terms for every backend and dtype (scipy's astype sorts them;
        # a CorpusGraph's are sorted already): the CPU's products then agree to the bit
        A, AT = (M if M.has_sorted_indices else M.sorted_indices() for M in (A, AT))
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
        """The operator of ``graph`` on ``device``, reusing a GraphOperator already there.

        Parameters
        ----------
        graph : GraphOperator, CorpusGraph or matrix
            A GraphOperator, a CorpusGraph (anything with ``.A`` and ``.AT``), a scipy sparse
            matrix or a torch (sparse) tensor.
        device : str or torch.device
            Where the products run.
        backend : {"scipy", "torch"}, optional
            As for the constructor; a GraphOperator on another backend is rebuilt.

        Returns
        -------
        GraphOperator
            ``graph`` itself where it is a GraphOperator on ``device`` and ``backend``.
        """
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

    def _row_blocks(self):
        """The runs of rows of equal work of A and A^T for ``paper_kernels.product``, computed once."""
        if "row_blocks" not in self._by_dtype:
            blocks = cpu_kernels.load("paper").row_blocks
            self._by_dtype["row_blocks"] = tuple(blocks(self._scipy[m].indptr) for m in ("A", "AT"))
        return self._by_dtype["row_blocks"]

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
                # scipy's kernel runs on one thread; numba's splits the rows over torch's
                # threads and adds each row's terms in the same order, so the bits are scipy's
                # on every CPU (tests/systems/layers/test_graphmax.py) in less time (benchmarks/graph_products.py).
                bounds_A, bounds_AT = self._row_blocks()
                BXT = _cpu_times(A.indptr, A.indices, A.data, XT, bounds_A)
                np.subtract(XT, BXT, out=BXT)
                MXT = _cpu_times(AT.indptr, AT.indices, AT.data, BXT, bounds_AT)
            else:
                BXT = A @ XT
                np.subtract(XT, BXT, out=BXT)
                MXT = AT @ BXT
            np.subtract(BXT, MXT, out=MXT)
            return torch.from_numpy(BXT), torch.from_numpy(MXT)
        XT = XT.contiguous()
        BXT = XT - _times(A, XT)
        return BXT, BXT - _times(AT, BXT)

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
        token among the hubs or -1, dense ``M[S, S]``), on the device. Computed once per
        operator and dtype."""
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
        """The operator of x living on the token ids ``support`` (the top-k restriction)."""
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
        BXT = -_times(self.AS, XT)
        BXT[self.pos] += XT
        MXT = BXT[self.pos] - _times(self.ATS, BXT)
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

"""The graphmax output layer: the model's logits regularised by a corpus graph.

Parameters (as written in a system string, e.g. ``graphmax(lam=1.0,solver=exact)``):
``lam`` (default 1.0, the paper's choice), ``solver`` ("exact": the certified fixed point;
"paper": the paper's Algorithm 1, which does not reach the optimum - see
docs/graphmax-math.md), ``tol``, ``max_iter`` and ``topk`` for the exact solver, and
``ngram`` for the graph (1: A, 2: A + A^2). The graph is built from (or loaded for) the
fitting split of the run's corpus with the model's own tokenizer.
"""

from __future__ import annotations

import torch

from maxbench.errors import MaxbenchError
from maxbench.systems.layers.base import FitContext, OutputLayer, require_finite_logits
from maxbench.systems.layers.graphmax.graph_operator import GraphOperator
from maxbench.systems.layers.graphmax.operator import check_graphmax_args, graphmax


class GraphmaxLayer(OutputLayer):
    name = "graphmax"
    needs_fit = True

    def __init__(
        self,
        lam: float = 1.0,
        solver: str = "exact",
        tol: float = 1e-6,
        max_iter: int = 100,
        topk: int | None = None,
        ngram: int = 1,
    ):
        check_graphmax_args(lam, solver, tol, max_iter, topk)
        if ngram not in (1, 2):
            raise MaxbenchError(f"graphmax: ngram must be 1 (A) or 2 (A + A^2), got {ngram!r}")
        self.lam, self.solver, self.tol, self.max_iter, self.topk, self.ngram = (
            float(lam),
            solver,
            float(tol),
            max_iter,
            topk,
            ngram,
        )
        # The paper's algorithm and the top-k restriction give exact zeros; the exact solver
        # on the whole vocabulary gives every token positive probability.
        self.can_be_sparse = solver == "paper" or topk is not None
        self.graph = None
        self._operators: dict[str, GraphOperator] = {}
        self._last: dict[str, torch.Tensor] = {}
        self.last_info = None

    def params(self) -> dict:
        out = {"lam": self.lam, "solver": self.solver}
        if self.solver == "exact":
            out.update(tol=self.tol, max_iter=self.max_iter)
            if self.topk is not None:
                out["topk"] = self.topk
        if self.ngram != 1:
            out["ngram"] = self.ngram
        return out

    def fit(self, ctx: FitContext) -> None:
        from maxbench.systems.graph import get_graph

        if ctx.corpus is None:
            raise MaxbenchError("graphmax needs a corpus to build its graph from; pass --corpus (e.g. food-reviews)")
        self.use_graph(get_graph(ctx.model, ctx.corpus, ngram=self.ngram), ctx.model)

    def fit_busy(self, ctx: FitContext) -> bool:
        """Whether ``fit(ctx)`` would now wait on another process building this graph (another
        graphmax system of the same model, corpus and ``ngram`` shares it)."""
        from maxbench.systems.graph import busy

        return ctx.corpus is not None and busy(ctx.model, ctx.corpus, ngram=self.ngram)

    def use_graph(self, graph, lm=None) -> None:
        """Use an already built CorpusGraph (checked against the model when one is given)."""
        if lm is not None:
            graph.check_model(lm)
        self.graph = graph
        self._operators = {}

    def resource_hashes(self) -> dict:
        if self.graph is None:
            return {}
        return {
            "graph_sha256": self.graph.sha256,
            "graph_corpus_sha256": self.graph.corpus_sha256,
            "graph_options": dict(self.graph.options),
            "graph_nnz": self.graph.nnz,
        }

    def _operator(self, device: torch.device) -> GraphOperator:
        key = str(device)
        if key not in self._operators:
            self._operators[key] = GraphOperator.prepare(self.graph, device)
        return self._operators[key]

    def scores(self, logits: torch.Tensor, hidden: torch.Tensor | None) -> torch.Tensor:
        if self.graph is None:
            raise MaxbenchError("graphmax: the layer has no graph yet; fit it with a corpus first")
        require_finite_logits(logits, self.name)
        if logits.shape[-1] != self.graph.vocab_size:
            raise MaxbenchError(
                f"graphmax: the model gives {logits.shape[-1]} logits but the graph has "
                f"{self.graph.vocab_size} nodes; build the graph for this model"
            )
        kwargs = {"tol": self.tol, "max_iter": self.max_iter, "topk": self.topk} if self.solver == "exact" else {}
        # only the log-probabilities are used: probs=False skips exponentiating them
        _, info = graphmax(
            logits,
            self._operator(logits.device),
            lam=self.lam,
            solver=self.solver,
            return_info=True,
            probs=False,
            **kwargs,
        )
        self._last = {"iterations": info.iterations, "gap": info.gap}
        self.last_info = info  # everything the solver reported (benchmarks read the relative gap)
        return info.log_probs.to(logits.dtype)

    def step_stats(self) -> dict[str, torch.Tensor]:
        return dict(self._last)

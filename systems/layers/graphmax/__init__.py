"""graphmax: the operator (``operator``: ``graphmax()`` and its argument checks), the graph's
products (``graph_operator``), the exact solver (``exact``, ``evaluation``, ``isolated``,
``presolve``, the numba ``kernels``), its implicit backward (``backward``), the paper's
Algorithm 1 (``paper``) and the output layer (``layer``). The math is in docs/graphmax-math.md."""

"""DeepSeek-V3 multi-token prediction modules as a draft, batched (reference:
``reference/proposers/mtp.py``).

Module k (k = 1..K) maps, at every position i, ``[RMSNorm(h^{k-1}_i) ; RMSNorm(E x_{i+k})]``
through its projection and its causal block to ``h^k_i`` (``h^0`` the target's top-layer
feature); the law of depth d is the target's head on ``h^{d+1}`` at the last committed feature
(position n - 2). Position i of module k reads committed tokens only while ``i + k <= n - 1``:
those outputs are kept (their K/V in layer k - 1 of the drafter's paged cache, their ``h^k``
for module k + 1) and :meth:`MTP.begin` runs only the positions committed since the last step.
The last ``k - 1`` positions read draft tokens: drafting depth d runs module d + 1 over them
(a short chain per row over the cached prefix), fed by the tail module d computed one depth
earlier. Chains only, at most K drafts.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from specproof.reference.errors import NotAChainError
from specproof.reference.proposers.mtp import MTPModules
from specproof.reference.transformer import TinyTransformer, rms_norm

from ..paged_kv import QueryBatch, chain_rows
from .selfdraft import BatchedDrafter, BlockNet, Features, Node, Placement, TargetHead, need_two, to_law


class MTP(BatchedDrafter):
    reads_features = True

    def __init__(self, net: MTPModules, target: TinyTransformer, at: Placement) -> None:
        self.vocab = target.vocab
        self.max_depth = net.max_depth
        self.K = int(net.max_depth or 0)
        self.proj = [at.copy(p) for p in net.proj]
        self.norm_h = at.copy(net.norm_h)
        self.norm_e = at.copy(net.norm_e)
        self.embed = at.copy(target.embed)
        self.net = BlockNet(list(net.blocks), target, at)
        self.cache = self.net.cache()
        self.head = TargetHead(target, at)
        self.top = Features([target.config.layers])
        self.h: dict[Hashable, list[torch.Tensor]] = {}  # h[rid][k - 1]: module k's committed outputs
        self._rids: list[Hashable] = []
        self._ctx: list[list[int]] = []
        self._paths: dict[tuple[int, int], list[int]] = {}
        self._tails: dict[tuple[int, int], torch.Tensor] = {}

    def admit(self, rid: Hashable, prompt: Sequence[int]) -> None:
        self.cache.admit(rid)
        self.top.admit(rid)
        self.h[rid] = [self.embed.new_zeros(0, self.embed.shape[1]) for _ in range(self.K)]

    def release(self, rid: Hashable) -> None:
        self.cache.release(rid)
        self.top.release(rid)
        del self.h[rid]

    def observe(self, rid: Hashable, hidden: list[torch.Tensor]) -> None:
        self.top.add(rid, hidden)

    def _inputs(self, k: int, h_prev: torch.Tensor, tokens: Sequence[int]) -> torch.Tensor:
        e = self.embed[list(tokens)]
        x = torch.cat([rms_norm(h_prev, self.norm_h[k - 1]), rms_norm(e, self.norm_e[k - 1])], -1)
        return x @ self.proj[k - 1]

    def _chains(
        self, k: int, rows: list[int], starts: list[int], xs: list[torch.Tensor]
    ) -> list[torch.Tensor]:
        """Run module k over a chain per row (inputs ``xs``, slots from ``starts``)."""
        keep = [i for i, x in enumerate(xs) if x.shape[0]]
        if not keep:
            return [x[:0] for x in xs]
        batch = QueryBatch.build(
            self.cache,
            [self._rids[rows[i]] for i in keep],
            chain_rows([starts[i] for i in keep], [[0] * xs[i].shape[0] for i in keep]),
        )
        out = self.net.run(torch.cat([xs[i] for i in keep]), batch, self.cache, layer=k - 1)
        res = [x[:0] for x in xs]
        for j, i in enumerate(keep):
            s, c = int(batch.start[j]), int(batch.count[j])
            res[i] = out[s : s + c]
        return res

    def begin(self, rids: Sequence[Hashable], contexts: Sequence[Sequence[int]]) -> torch.Tensor:
        self._rids, self._ctx = list(rids), [list(c) for c in contexts]
        rows = list(range(len(rids)))
        for r, c in zip(rids, contexts):
            need_two(r, len(c))
        for k in range(1, self.K + 1):
            starts, xs = [], []
            for r, c in zip(rids, contexts):
                lo, hi = int(self.h[r][k - 1].shape[0]), max(0, len(c) - k)
                prev = self.top.get(r, lo, hi)[0] if k == 1 else self.h[r][k - 2][lo:hi]
                starts.append(lo)
                xs.append(self._inputs(k, prev, [c[i + k] for i in range(lo, hi)]))
            for r, out in zip(rids, self._chains(k, rows, starts, xs)):
                self.h[r][k - 1] = torch.cat([self.h[r][k - 1], out])
        for r, c in zip(rids, contexts):
            self.cache.set_length(r, len(c) - 1)
        self._paths = {(b, 0): [] for b in rows}
        self._tails = {}
        last = torch.stack([self.h[r][0][len(c) - 2] for r, c in zip(rids, contexts)])
        return to_law(self.head(last))

    def expand(self, nodes: Sequence[Node]) -> torch.Tensor:
        seen = set()
        for n in nodes:
            if n.row in seen:
                raise NotAChainError("shape", "MTP drafts chains: one node per depth and row")
            seen.add(n.row)
        out = self.embed.new_empty(len(nodes), self.vocab)
        for d in sorted({n.depth for n in nodes}):
            group = [i for i, n in enumerate(nodes) if n.depth == d]
            m = d + 1  # module m gives the law after a path of length d
            starts, xs, rows = [], [], []
            for i in group:
                n = nodes[i]
                r, c = self._rids[n.row], self._ctx[n.row]
                path = self._paths[(n.row, n.parent)] + [n.token]
                self._paths[(n.row, n.nid)] = path
                full = c + path
                N = len(c)
                lo = max(0, N - m)
                kept = int(self.h[r][m - 2].shape[0])  # module m - 1's committed positions
                prev = self.h[r][m - 2][lo:kept]
                tail = self._tails.get((n.row, n.parent))
                if kept < N - 1:
                    assert tail is not None, "the parent's tail of module m - 1"
                    prev = torch.cat([prev, tail[kept - (N - m + 1) :]])
                starts.append(lo)
                rows.append(n.row)
                xs.append(self._inputs(m, prev, [full[i + m] for i in range(lo, N - 1)]))
            for i, res in zip(group, self._chains(m, rows, starts, xs)):
                n = nodes[i]
                self._tails[(n.row, n.nid)] = res
                out[i] = to_law(self.head(res[-1:]))[0]
        return out

    def end(self) -> None:
        for r, c in zip(self._rids, self._ctx):
            self.cache.set_length(r, len(c) - 1)
        self._paths, self._tails = {}, {}

"""Prompt lookup / n-gram drafting, batched (reference: ``reference/proposers/ngram.py``).

For every row at once: the token after the most recent earlier occurrence of the context's
last ``n`` tokens, trying ``n = max_n`` down to 1, else the context's last token; the law is
one-hot there. Contexts of different lengths are padded with -1 (never a token), the windows
of each n compared with the row's tail in one tensor operation.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from specproof.reference.proposers.ngram import NgramLM

from .selfdraft import BatchedDrafter, Node, Placement


def lookup(contexts: Sequence[Sequence[int]], max_n: int) -> torch.Tensor:
    """``[M]`` the reference's ``NgramLM.lookup`` of each context (each at least one token)."""
    M = len(contexts)
    lens = torch.tensor([len(c) for c in contexts])
    L = int(lens.max())
    ctx = torch.full((M, L + 1), -1, dtype=torch.int64)
    for m, c in enumerate(contexts):
        ctx[m, : len(c)] = torch.tensor(list(c), dtype=torch.int64)
    out = ctx[torch.arange(M), lens - 1].clone()  # no match: the last token
    done = torch.zeros(M, dtype=torch.bool)
    for n in range(min(max_n, L - 1), 0, -1):
        ok = (lens - 1 >= n) & ~done
        if not bool(ok.any()):
            continue
        tail = ctx.gather(1, (lens - n).clamp(min=0)[:, None] + torch.arange(n)[None, :])  # [M, n]
        win = ctx[:, :L].unfold(1, n, 1)  # [M, L - n + 1, n]: windows starting at 0..L-n
        starts = torch.arange(win.shape[1])
        match = (win == tail[:, None, :]).all(-1) & (starts[None, :] <= (lens - n - 1)[:, None])
        best = torch.where(match, starts[None, :], -1).max(1).values
        hit = ok & (best >= 0)
        nxt = ctx.gather(1, (best + n).clamp(min=0)[:, None])[:, 0]
        out = torch.where(hit, nxt, out)
        done |= hit
    return out


class Ngram(BatchedDrafter):
    def __init__(self, lm: NgramLM, at: Placement) -> None:
        self.vocab, self.max_n, self.dtype = lm.vocab, lm.max_n, at.dtype
        self.device = at.device or torch.device("cpu")
        self._paths: dict[tuple[int, int], list[int]] = {}

    def _laws(self, contexts: Sequence[Sequence[int]]) -> torch.Tensor:
        x = lookup(contexts, self.max_n)
        return torch.nn.functional.one_hot(x, self.vocab).to(self.device, self.dtype)

    def begin(self, rids: Sequence[Hashable], contexts: Sequence[Sequence[int]]) -> torch.Tensor:
        self._paths = {(b, 0): list(c) for b, c in enumerate(contexts)}
        return self._laws(list(self._paths.values()))

    def expand(self, nodes: Sequence[Node]) -> torch.Tensor:
        for n in nodes:
            self._paths[(n.row, n.nid)] = self._paths[(n.row, n.parent)] + [n.token]
        return self._laws([self._paths[(n.row, n.nid)] for n in nodes])

    def end(self) -> None:
        self._paths = {}

"""The proposal processes, batched over rows (reference: ``reference/processes.py`` and
``reference/dynamic_tree.py``).

:func:`propose` grows every row's tree from a static shape, depth by depth: the drafter gives
the laws of the frontier's nodes for all rows at once, and each node's children are chosen by
the process exactly as the reference chooses them, drawing with the reference's tape semantics
(uniform ``u_draft[b, s]`` of site ``("draft", s)``, inverse CDF in index order; top-k by
probability, ties to the smaller id). Concrete nodes are numbered as the reference numbers them
(breadth first, children in shape order), so node i here is node i of the reference's proposal.

:func:`propose_dynamic` is EAGLE-2's dynamic tree: the beam of ``k`` nodes by cumulative log
draft probability per depth (ties: creation order), the candidates' top-k children, then the
global top N (ties: shallower, then earlier), every row at once. All rows have N + 1 nodes;
their shapes differ.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

from specproof.reference.dynamic_tree import DynamicTree, candidates
from specproof.reference.errors import NotAChainError, ShapeError, UsageError
from specproof.reference.processes import Process
from specproof.reference.tree import DraftTree

from .selfdraft import BatchedDrafter, Node


@dataclass
class RowProposal:
    """One row's tree: ``tokens[0]`` the last committed token; ``draft_laws[i]`` the law node
    i's children were drawn from (zeros where node i has none), or None (one-hot drafts)."""

    parents: list[int]
    tokens: list[int]
    shape_nodes: list[int]
    draft_laws: torch.Tensor | None


def categorical(w: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The reference's ``categorical_from_uniform`` on each row of ``w [M, V]`` (float64): the
    smallest i with ``w[i] > 0`` and ``u * total < w[0] + .. + w[i]`` (sums left to right), else
    the last positive index."""
    cs = torch.cumsum(w, -1)
    x = u * cs[:, -1]
    pos = w > 0
    hit = pos & (x[:, None] < cs)
    idx = torch.arange(w.shape[1], device=w.device)
    first = torch.where(hit, idx, w.shape[1]).min(-1).values
    last = torch.where(pos, idx, -1).max(-1).values
    return torch.where(first < w.shape[1], first, last)


def ranked(q: torch.Tensor) -> torch.Tensor:
    """Token ids of each row by probability, ties to the smaller id."""
    return torch.sort(q, dim=-1, descending=True, stable=True).indices


def choose(kind: str, q: torch.Tensor, kids: Sequence[int], u: torch.Tensor) -> list[list[int]]:
    """Children tokens of each row of ``q [M, V]`` (float64): ``kids[m]`` wanted, with the
    uniforms ``u [M, max kids]`` of their sites, by the process ``kind``."""
    M = q.shape[0]
    K = max(kids, default=0)
    out: list[list[int]] = [[] for _ in range(M)]
    if kind in ("topk_any", "topk_support"):
        order = ranked(q)[:, :K].tolist()
        for m in range(M):
            toks = order[m][: kids[m]]
            if kind == "topk_support":
                toks = [x for x in toks if q[m, x] > 0]
            out[m] = toks
        return out
    w = q.clone()
    for j in range(K):
        want = torch.tensor([kids[m] > j for m in range(M)], device=q.device)
        if kind == "wor":
            want &= (w > 0).any(-1)
        x = categorical(w, u[:, j]).tolist()
        for m in range(M):
            if want[m]:
                out[m].append(x[m])
                if kind == "wor":
                    w[m, x[m]] = 0.0
    return out


#: the batched chooser of each static process
KINDS = {
    "iid_chain": "iid",
    "iid_siblings": "iid",
    "onehot_chain": "topk_any",
    "onehot_siblings": "topk_any",
    "wor_siblings": "wor",
    "topk_siblings": "topk_support",
}


def propose(
    drafter: BatchedDrafter,
    process: Process,
    shape: DraftTree,
    rids: Sequence[Hashable],
    contexts: Sequence[Sequence[int]],
    u_draft: torch.Tensor,
) -> list[RowProposal]:
    """Every row's tree from the static ``shape`` (module doc); ``u_draft [B, shape.n]``."""
    if isinstance(process, DynamicTree):
        return propose_dynamic(drafter, process, shape, rids, contexts)
    if process.name not in KINDS:
        raise ShapeError("process", f"{process.name!r} has no batched chooser; known: {', '.join(KINDS)}")
    if process.chain and not shape.is_chain:
        raise NotAChainError("shape", f"process {process.name} drafts chains; this shape branches")
    kind = KINDS[process.name]
    B = len(rids)
    try:
        root = drafter.begin(rids, contexts)
        props = [RowProposal([-1], [int(c[-1])], [0], None) for c in contexts]
        laws: list[dict[int, torch.Tensor]] = [{0: root[b]} for b in range(B)]
        frontier = [(b, 0, 0) for b in range(B)] if shape.children[0] else []
        while frontier:
            q = torch.stack([laws[b][i] for b, i, _ in frontier]).double()
            kids = [len(shape.children[s]) for _, _, s in frontier]
            width = max(kids)
            u = torch.zeros(len(frontier), width, dtype=torch.float64)  # filled on the host
            for m, (b, _, s) in enumerate(frontier):
                sites = shape.children[s]
                u[m, : len(sites)] = u_draft[b, list(sites)]
            picked = choose(kind, q, kids, u.to(q.device))
            new: list[Node] = []
            shapes: list[int] = []
            for (b, i, s), toks in zip(frontier, picked):
                p = props[b]
                for s_child, x in zip(shape.children[s], toks):
                    new.append(Node(b, len(p.parents), i, int(x), shape.depth[s_child]))
                    shapes.append(s_child)
                    p.parents.append(i)
                    p.tokens.append(int(x))
                    p.shape_nodes.append(s_child)
            grow = [(n, s) for n, s in zip(new, shapes) if shape.children[s]]
            if grow:
                for n, _ in grow:
                    drafter.check_depth(n.depth)
                got = drafter.expand([n for n, _ in grow])
                for (n, _), law in zip(grow, got):
                    laws[n.row][n.nid] = law
            frontier = [(n.row, n.nid, s) for n, s in grow]
    finally:
        drafter.end()
    if process.gives_draft_probs:
        for b, p in enumerate(props):
            V = root.shape[-1]
            d = root.new_zeros(len(p.parents), V)
            for i, law in laws[b].items():
                if i in set(p.parents[1:]):
                    d[i] = law
            p.draft_laws = d
    return props


def propose_dynamic(
    drafter: BatchedDrafter,
    process: DynamicTree,
    shape: DraftTree,
    rids: Sequence[Hashable],
    contexts: Sequence[Sequence[int]],
) -> list[RowProposal]:
    """EAGLE-2's dynamic tree for every row (module doc); ``shape`` is a chain of depth D."""
    if not shape.is_chain:
        raise NotAChainError("shape", "the dynamic tree takes a chain of its depth D as its shape")
    depth, k, N = shape.max_depth, process.top_k, process.nodes
    if N > candidates(depth, k) or k > drafter.vocab:
        raise UsageError(
            f"nodes: {N} exceed the {candidates(depth, k)} candidates of depth {depth}, "
            f"top_k {k} (or top_k exceeds the vocabulary {drafter.vocab})"
        )
    B = len(rids)
    try:
        beam_laws = drafter.begin(rids, contexts).double()[:, None, :]  # [B, beam, V]
        dev = beam_laws.device
        beam_idx = torch.full((B, 1), -1, dtype=torch.int64, device=dev)
        beam_lv = torch.zeros(B, 1, dtype=torch.float64, device=dev)
        par, tok, lvs = [], [], []
        count = 0
        for d in range(1, depth + 1):
            nb = beam_laws.shape[1]
            top = ranked(beam_laws)[:, :, :k]  # [B, nb, k]
            q = beam_laws.gather(2, top)
            lv = beam_lv[:, :, None] + torch.where(q > 0, q.log(), -math.inf)
            layer_par = beam_idx[:, :, None].expand(B, nb, k).reshape(B, nb * k)
            layer_tok = top.reshape(B, nb * k)
            layer_lv = lv.reshape(B, nb * k)
            ids = count + torch.arange(nb * k, device=dev)
            par.append(layer_par)
            tok.append(layer_tok)
            lvs.append(layer_lv)
            count += nb * k
            order = torch.sort(-layer_lv, dim=1, stable=True).indices[:, :k]
            beam_idx = ids[order]
            beam_lv = layer_lv.gather(1, order)
            if d < depth:
                P, X = torch.cat(par, 1), torch.cat(tok, 1)
                nodes = [
                    Node(b, int(c) + 1, int(P[b, c]) + 1, int(X[b, c]), d)
                    for b in range(B)
                    for c in beam_idx[b].tolist()
                ]
                for n in nodes:
                    drafter.check_depth(n.depth)
                beam_laws = drafter.expand(nodes).double().reshape(B, k, -1)
    finally:
        drafter.end()
    P, X, LV = torch.cat(par, 1), torch.cat(tok, 1), torch.cat(lvs, 1)
    keep = torch.sort(torch.sort(-LV, dim=1, stable=True).indices[:, :N], dim=1).values
    out = []
    for b in range(B):
        node_of = {-1: 0}
        parents, tokens = [-1], [int(contexts[b][-1])]
        for c in keep[b].tolist():
            node_of[c] = len(parents)
            parents.append(node_of[int(P[b, c])])
            tokens.append(int(X[b, c]))
        out.append(RowProposal(parents, tokens, list(range(len(parents))), None))
    return out

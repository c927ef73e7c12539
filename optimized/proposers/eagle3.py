"""EAGLE-3's draft network, batched (reference: ``reference/proposers/eagle3.py``).

As EAGLE-1 (:class:`.eagle1.FeatureDraft`: committed positions cached, the tree drafted one
batched forward per depth), with the committed feature ``g_i = FC_fuse([l_i ; m_i ; h_i])``
(the target's embeddings, middle and top hidden states), its own outputs fed back below node 0,
and its own head. It drafts EAGLE-2's dynamic tree.
"""

from __future__ import annotations

from specproof.reference.proposers.eagle3 import Eagle3Net
from specproof.reference.transformer import TinyTransformer

from .eagle1 import FeatureDraft
from .selfdraft import OwnHeadWeights, Placement, fused, fused_layers


class Eagle3(FeatureDraft):
    def __init__(self, net: Eagle3Net, target: TinyTransformer, at: Placement) -> None:
        fuse = at.copy(net.fuse)
        head = OwnHeadWeights(net.head, at)
        super().__init__(target, net.block, net.fc, fused_layers(target), lambda h: fused(h) @ fuse, head, at)

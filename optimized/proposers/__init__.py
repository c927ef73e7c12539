"""Batched proposers, name for name with ``reference/proposers/``, on the reference's weights.

=======  ==============================  ==========================================
name     module                          drafts (batched over requests)
=======  ==============================  ==========================================
draft    :mod:`.draft_model`             the draft transformer on its own paged cache
ngram    :mod:`.ngram`                   prompt lookup, all rows in one tensor pass
medusa   :mod:`.medusa`                  every head for every row in one pass
medusa2  :mod:`.medusa`                  the same heads, on Medusa-2's fine-tuned backbone
eagle1   :mod:`.eagle1`                  feature draft block over a paged cache, tree per depth
eagle2   :mod:`.eagle1` + dynamic tree   the same network, EAGLE-2's tree (:mod:`.processes`)
eagle3   :mod:`.eagle3`                  fused features, own head, dynamic tree
mtp      :mod:`.mtp`                     K modules, committed positions cached per module
dflash   :mod:`.dflash`                  one pass: context rows cached, block rows bidirectional
=======  ==============================  ==========================================

:func:`twin` builds the batched drafter of a reference proposer from the reference's own
objects: it asks the reference for its drafter (``Proposer.make_drafter``, distilled weights
from the same cache) and reads the network, the draft transformer or the n-gram model out of
it, so the weights are the reference networks', never retrained. The proposal processes that
grow trees from a drafter are in :mod:`.processes`. Coupling with the reference loop:
tests/test_optimized_decode.py, proofs_notes/optimized_decode.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from specproof.reference.errors import BadParameterError
from specproof.reference.proposers import PROPOSERS, Proposer
from specproof.reference.proposers.dflash import DFlashNet
from specproof.reference.proposers.eagle1 import Eagle1Net
from specproof.reference.proposers.eagle3 import Eagle3Net
from specproof.reference.proposers.medusa import MedusaHeads
from specproof.reference.proposers.mtp import MTPModules
from specproof.reference.proposers.ngram import NgramLM
from specproof.reference.proposers.selfdraft import BoundDraft
from specproof.reference.transformer import TinyTransformer, TransformerLM

from .dflash import DFlash
from .draft_model import DraftModel
from .eagle1 import Eagle1
from .eagle3 import Eagle3
from .medusa import Medusa
from .mtp import MTP
from .ngram import Ngram
from .processes import RowProposal, propose
from .selfdraft import BatchedDrafter, Node, Placement

#: the batched twin of each reference draft network class
NETS: dict[type, Callable[..., BatchedDrafter]] = {
    MedusaHeads: Medusa,
    Eagle1Net: Eagle1,
    Eagle3Net: Eagle3,
    MTPModules: MTP,
    DFlashNet: DFlash,
}


def twin(
    proposer: str | Proposer,
    target: TinyTransformer,
    *,
    trained: bool = True,
    dtype: torch.dtype = torch.float64,
    block_size: int = 16,
    num_blocks: int = 512,
    poison: bool = False,
    device: torch.device | None = None,
) -> BatchedDrafter:
    """The batched drafter of ``proposer`` (a name of ``PROPOSERS`` or a reference
    :class:`~specproof.reference.proposers.Proposer`) over ``target``, on the same weights."""
    if isinstance(proposer, str):
        if proposer not in PROPOSERS:
            raise BadParameterError("proposer", f"{proposer!r} is unknown; available: {', '.join(PROPOSERS)}")
        proposer = PROPOSERS[proposer]
    probe: Any = proposer.make_drafter(target, trained)((0, 0))  # a step's draft model
    at = Placement(dtype, device, block_size, num_blocks, poison)
    if isinstance(probe, BoundDraft):
        if probe.temperature != 1.0:
            raise BadParameterError("proposer", "batched drafters draft at temperature 1, as the reference's")
        make = next((m for cls, m in NETS.items() if isinstance(probe.net, cls)), None)
        if make is None:
            raise BadParameterError("proposer", f"no batched twin of {type(probe.net).__name__} yet")
        # the network reads the features of the model it was bound to (Medusa-2: the fine-tuned
        # backbone, which is also the model that verifies)
        return make(probe.net, probe.target, at)
    if isinstance(probe, TransformerLM):
        return DraftModel(probe, at)
    if isinstance(probe, NgramLM):
        return Ngram(probe, at)
    raise BadParameterError("proposer", f"no batched twin of a {type(probe).__name__} drafter")


__all__ = ["NETS", "BatchedDrafter", "Node", "Placement", "RowProposal", "propose", "twin"]

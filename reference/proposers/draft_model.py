"""An independent draft model (Leviathan et al. 2023; Chen et al. 2023): a smaller transformer
over the target's vocabulary, sampled autoregressively (process ``iid_chain``, verified with
its laws) or decoded greedily (``onehot_chain``). Exactness is the rules' (proofs_notes/token.md,
block.md); on real transformers: tests/test_transformer_exact.py, tests/test_proposers.py.

Its declared process, and why: proofs_notes/proposers.md (tests/test_proposers.py).
"""

from __future__ import annotations

from ..transformer import Config, TinyTransformer, TransformerLM


def draft_model(target: TinyTransformer, seed: int = 1000, temperature: float = 1.0) -> TransformerLM:
    """A one-layer transformer of half the target's width (at least 8), its own seed."""
    cfg = target.config
    width = max(8, cfg.width // 2)
    heads = 2 if width % 4 == 0 else 1
    small = Config(
        vocab=cfg.vocab, width=width, layers=1, heads=heads, mlp=2 * width, rope_base=cfg.rope_base
    )
    return TransformerLM(TinyTransformer(small, seed=seed), temperature)

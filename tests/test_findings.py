"""Findings on third-party verifiers reproduced in the reference (properties/oracle/findings.py).

EAGLE-1's posterior divides by the original q(x) instead of q renormalized without the siblings
already tried: as a reference rule, the exact oracle finds it lossy under drafting without
replacement (TV = 3/8 exactly on a 3-token, two-sibling instance), while RRS is exact on the same
instance. Medusa-1's posterior (typical acceptance, then the argmax as the next token) is lossy
even with one draft and q = p (TV = 21/26). That the packages' own functions behave as the
reproductions: tests/test_thirdparty.py.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

from specproof.properties.oracle.exact import check
from specproof.properties.oracle.findings import (
    EAGLE_RATIO,
    EAGLE_WITNESS,
    MEDUSA_WITNESS,
    eagle_ratio_witness,
    medusa_typical_witness,
)


def test_eagle_ratio_reproduction_is_lossy_where_rrs_is_exact():
    res = eagle_ratio_witness()
    assert res.tv == Fraction(3, 8), res.explain()
    assert check("rrs", "wor_siblings", EAGLE_WITNESS).tv == 0
    # with one child per node the two rules coincide (no sibling was tried before): exact
    chain = dataclasses.replace(EAGLE_WITNESS, shape=(-1, 0, 1))
    assert check(EAGLE_RATIO, "wor_siblings", chain).tv == 0


def test_medusa_typical_reproduction_is_lossy_even_with_one_draft_and_q_equal_p():
    res = medusa_typical_witness()
    assert res.tv == Fraction(21, 26), res.explain()
    assert check("typical", "onehot_siblings", MEDUSA_WITNESS).tv > 0  # sampling the final token: lossy too

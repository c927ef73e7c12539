"""The token test: every emitted token scored against the target's law at its own prefix.

* :mod:`.law` — a position's law, dense, sparse or censored (a server's top-n);
* :mod:`.transform` — the randomized probability integral transform and its companions;
* :mod:`.eprocess` — test martingales (testing by betting): valid at any stopping time;
* :mod:`.family` — the statistics aimed at the bug classes, combined into one wealth;
* :mod:`.power` — the plan in tokens, the power of each statistic, the information limit;
* :mod:`.case` — the token test of an audit's cases, as the engine audit feeds it.

The null and its proof: proofs_notes/token_audit.md.
"""

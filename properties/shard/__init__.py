"""Audits sharded over Ray workers: the same verdict, p-values and JSON for any number of workers.

:class:`~.engine.RayDrawer` draws the engine audit's (and the endpoint audit's) samples on Ray
actors, each with its own replica of the engine; :class:`~.verifier.RayCaller` runs the verifier
audit's sampling calls on actors, each with its own replica of the verifier. The driver plans,
merges in index order and tests. :mod:`.recipe` says what a worker is told (how to build its
replica, never the replica), :mod:`.wire` what comes back (packed arrays), :mod:`.pool` how jobs
are dispatched, answered in order, and re-run when an actor dies. docs/sharding.md has the design,
the guarantees and the commands. Ray is optional (``pip install 'specproof[ray]'``) and imported
only when a pool starts.
"""

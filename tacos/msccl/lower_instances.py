"""The error an ``I``-instance MSCCL lowering raises, derived from its failed one-instance
lowering when every round of that one only cut lanes and numbered channels.

:func:`failure_at_instances` answers without lowering.  Its claim: let the lowering of a
schedule with options ``O`` (one instance) have failed at round ``R``'s channel numbering
(:func:`tacos.msccl.lower_channels.assign_channels`, "the plan needs K_R channels") with no
step built in any round (every earlier round only cut lanes), after numbering ``K_1 .. K_R``
distinct channel keys in its rounds, and let every run of its flow carry one chunk although a
run could carry two or more (``max_count >= 2``), or every transfer carry one chunk.  Then
the lowering with ``O`` but ``I >= 2`` instances raises "the plan needs ``I·K_r``
channels" (same hint) at the first round ``r`` with ``I·K_r`` over ``max_channels`` (one
exists: ``K_R`` is over it).  Why:

1. *Locations.*  Piece ``p`` of input/output slot ``y`` is MSCCL chunk ``y·I + p``
   (:mod:`tacos.msccl.lower_layout`; the in-place alias adds ``rank·k·I``, a multiple of
   ``I``), so ``φ_p(y) = y·I + p`` maps the one-instance slots of every buffer to piece ``p``'s,
   keeping their order, and never to two adjacent slots (they differ by a multiple of
   ``I >= 2``).  ``build_flow`` (:mod:`tacos.msccl.lower_flow`) processes the transfers in the
   same order (the event order of :func:`tacos.msccl.lower_flow._ordered` does not depend on
   ``I``), each transfer's pieces one after the other, and a piece's choices (output slot or
   scratch, from the slot's occupant, its chunk and its last use: facts of versions, which do
   not depend on ``I``) only look at that piece's locations.  By induction over the
   transfers, piece ``p`` makes the one-instance choices with every location mapped by
   ``φ_p``, where ``φ_p`` on scratch maps the one-instance scratch slot to the one piece ``p``
   allocates in its place: piece ``p``'s allocations on a rank are the one-instance ones in
   the same order (the chunks of a transfer are taken in the order of their read locations,
   which ``φ_p`` keeps), and its numbers grow along them, so ``φ_p`` keeps the order of
   scratch too.  Two scratch slots adjacent at ``I`` instances are consecutive allocations of
   one piece, so consecutive (adjacent) in the one-instance lowering too.
2. *Runs.*  ``_split`` joins two chunks of a transfer only when their sending, reduced and
   landing locations are all adjacent.  At one instance no two were joined although runs
   could hold two, so for every consecutive pair one location was not adjacent; by 1 it is
   not adjacent at ``I`` instances either (an input/output slot never is).  (A transfer of
   one chunk has no pair to join.)  So piece ``p``
   has one run per chunk of every transfer, as the one-instance flow: the same transfer,
   part, chunk, versions (read, created, reduced into), lane, and keys ``(pos, 0, p, part,
   0)`` instead of ``(pos, 0, 0, part, 0)``.  Runs of one piece are therefore in the
   one-instance order among themselves, the conn ``(src, dst, p, lane)`` holds piece ``p``'s
   runs only, and its ``conn_index`` numbers are the one-instance ones; the check that a later
   part is not overwritten compares the same keys, so it passes as it did.
3. *Rounds.*  Suppose the cuts of piece ``p`` at round ``r`` are the one-instance cuts on its
   conns (true at round 1: none).  A channel key ``(hint, piece, group, segment, lane)``
   differs between pieces, and the group of a pair, the hints and the lanes do not depend on
   ``I``: piece ``p``'s keys are the one-instance keys with the piece set to ``p``, so the
   round numbers ``I·K_r`` keys and raises when that is over ``max_channels``.  Otherwise
   ``plan_tbs`` keys thread blocks by channel, so each holds one piece's events in the
   one-instance order; its peers' matching (weights count a run fed by the run that created
   exactly its versions, in the same piece and channel), the pairing of single peers and the
   fusions (nothing is forbidden: no step was built) are the one-instance ones thread block
   by thread block.  ``_long_sequences`` then reports the same units per thread block, and
   ``_cut`` cuts each thread block's lanes from its own units only, so round ``r + 1`` starts
   with the one-instance cuts on every piece, and the round cut something exactly when the
   one-instance round did (rounds before ``R`` did: no step was built).  Port order only
   changes the steps, which no round built.

Only this failure is derived: a failure after a build (steps over the limit, "depid is an
int8", an unsafe fusion) depends on steps whose dependencies cross pieces, and is left to the
lowering itself.  So are flows whose runs join chunks, pipelined schedules (lowered as a new
first-round object) and failures no longer remembered (:data:`tacos.msccl.lower._FAILED`).
"""

from __future__ import annotations

from tacos.model.schedule import Schedule
from tacos.msccl.lower import MscclOptions, remembered_failure
from tacos.msccl.lower_channels import channels_error
from tacos.msccl.program import MAX_CHANNELS


def failure_at_instances(schedule: Schedule, options: MscclOptions, instances: int) -> str:
    """The message of the error the lowering of ``schedule`` with ``options`` but
    ``instances`` instances raises, derived (module doc: the proof) from the remembered failed
    lowering with ``options`` (one instance); '' when nothing is derived (no such failure
    remembered, or one the proof does not cover)."""
    if (not 2 <= instances <= MAX_CHANNELS or options.instances != 1
            or not isinstance(schedule, Schedule)):
        return ""  # over MAX_CHANNELS the options themselves are refused first
    got = remembered_failure(schedule, options)
    if got is None:
        return ""
    exc, seen = got
    counts = seen.channels
    if (seen.built or not seen.single_runs or not counts
            or counts[-1] <= options.max_channels
            or exc.message != channels_error(counts[-1], options.max_channels).message):
        return ""
    limit = options.max_channels
    needed = next(instances * k for k in counts if instances * k > limit)
    return channels_error(needed, limit).message

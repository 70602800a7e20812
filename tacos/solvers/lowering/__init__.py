"""The shared lowering from logical messages to a timed physical schedule (baselines, NCCL models,
``cost/`` and ``reshard/``): routing hops and relay chains in :mod:`.hops`, placing and timing
programs in :mod:`.program`.
"""

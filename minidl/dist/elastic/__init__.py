"""minidl.dist.elastic: data-parallel training that survives a dead worker in the job and takes new ones
(Horovod's elastic model): ``run(train)(state)``, a ``State`` that commits in memory, an ElasticSampler.

    state = elastic.State(model, optimizer, sampler=elastic.ElasticSampler(data), epoch=0, batch=0)

    @elastic.run
    def train(state):
        for state.epoch in range(state.epoch, EPOCHS):
            for x, y in loader:              # the sampler's share of what is left of the epoch
                step(x, y)
                state.sampler.record_batch(len(x))
                state.commit()               # the point a failure rolls back to

    train(state)    # under python -m minidl.dist.run --nproc-per-node N script.py

Make the DistributedDataParallel inside ``train`` (a group is rebuilt at every change); commit at the same
point on every rank, after a collective; an exception of the script's own ends the job, named (only a lost
worker is survived). Over several nodes (``--nnodes MIN:MAX``) the survivors on every node go on alike; a node
that joins restarts the job from its last distributed checkpoint (the launcher's way).
"""
from .membership import MembershipError
from .run import MembershipChanged, run
from .sampler import ElasticSampler
from .state import ObjectState, State

__all__ = ["ElasticSampler", "MembershipChanged", "MembershipError", "ObjectState", "State", "run"]

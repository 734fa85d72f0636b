"""The worker runtime: the worker loop, its executor threads, the heartbeat, wake-ups, shutdown signals.

One claim, in the order the modules follow it:

1. :mod:`.worker` -- the main thread claims due procedures (``store.claim``) and hands each, as a
   :class:`.running.RunningClaim`, to an executor thread (:mod:`.crew`); :mod:`.held` keeps the claims held
   (how many to claim ahead, the give-back of those that waited too long, those the heartbeat renews);
2. :mod:`.executor` -- runs the claim's steps (and :mod:`.hooks`: ``on_child_failed``, ``rollback``) and
   describes how each attempt ended with a value of :mod:`.endings` (continued, completed, suspended, failed,
   interrupted, parked, lost, ...);
3. :mod:`.settle` -- ``settle()`` writes that value with one call to ``store.transitions`` (fenced by
   ``store.fence``), reports it to the observers (:mod:`.observe`) and logs it. The heartbeat (a step past its
   timeout) and the worker (shutdown, a claim given back unstarted) settle through it too; whether a stopped
   claim is given back or parked is ``policy.interruption``'s one decision.

Beside them: :mod:`.heartbeat` renews the leases and does its named duties, :mod:`.reconnect` carries a claim
over a lost connection, :mod:`.wakeup` waits for LISTEN/NOTIFY.
"""

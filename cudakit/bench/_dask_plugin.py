"""The worker plugin that ends a `bench.py --dask` run where its kernels end (imports distributed, unlike dask.py)."""
from distributed import WorkerPlugin


class SynchronizeWhenIdle(WorkerPlugin):
    """A task ends when its kernels are queued, so a worker that finishes a task and has no other task left (none
    ready, running, waiting for data or fetching it) waits for its GPU before it tells the scheduler. A graph is
    then done, for the client, when every kernel of it has run on every worker, with no round trip of its own after
    the last task. (Waiting whenever nothing is ready would also wait while a task's data is on its way, and hold
    the worker's event loop, which receives it, for all the kernels queued so far.)"""

    name = "cudakit-synchronize-when-idle"

    def setup(self, worker):
        self.worker = worker

    def transition(self, key, start, finish, **kwargs):
        if start in ("executing", "long-running") and finish == "memory" and self.idle(self.worker.state):
            self.synchronize()

    @staticmethod
    def idle(state) -> bool:
        return not (state.ready or state.constrained or state.executing or state.long_running or state.waiting
                    or state.fetch_count or state.in_flight_tasks)

    def synchronize(self):
        import cupy

        cupy.cuda.runtime.deviceSynchronize()

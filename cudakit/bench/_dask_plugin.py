"""The worker plugin that ends a `bench.py --dask` run where its kernels end (imports distributed, unlike dask.py)."""
from distributed import WorkerPlugin


class SynchronizeWhenIdle(WorkerPlugin):
    """A task ends when its kernels are queued, so a worker that finishes a task with no other task ready or running
    waits for its GPU before it tells the scheduler. A graph is then done, for the client, when every kernel of it
    has run on every worker, with no round trip of its own after the last task."""

    name = "cudakit-synchronize-when-idle"

    def setup(self, worker):
        self.worker = worker

    def transition(self, key, start, finish, **kwargs):
        state = self.worker.state
        if start == "executing" and finish == "memory" and not state.ready and not state.executing_count:
            self.synchronize()

    def synchronize(self):
        import cupy

        cupy.cuda.runtime.deviceSynchronize()

"""The RL step's data: rollouts (:class:`~rlinf_core.rl.data.trajectory.Trajectory`), the flat training samples
made from them (:class:`~rlinf_core.rl.data.trajectory.Samples`) and the micro-batches they are trained in
(:class:`~rlinf_core.rl.data.micro_batch.MicroBatch`)."""

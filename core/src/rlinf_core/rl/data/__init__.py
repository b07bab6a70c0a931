"""The RL step's data: rollouts (:class:`~rlinf_core.rl.data.trajectory.Trajectory`) and the flat training samples
made from them (:class:`~rlinf_core.rl.data.trajectory.Samples`)."""

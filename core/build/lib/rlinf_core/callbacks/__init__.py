"""Lightning callbacks for rollout lifecycle work (videos)."""

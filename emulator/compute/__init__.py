"""Real gradient work: flat parameter vectors, lazy values, training jobs and executors."""

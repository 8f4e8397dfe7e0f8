"""Episodes into training samples: the one agent loop, env pools, task slots and expert guidance."""

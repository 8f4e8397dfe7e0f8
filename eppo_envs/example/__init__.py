"""A complete, minimal task written the way a user would write one (see README, "Add your own task")."""

"""taskloom."""

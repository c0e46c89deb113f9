"""PostgreSQL's append writer and its statements."""

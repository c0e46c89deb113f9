"""SQLite's append writer."""

"""SQLAlchemy: the models, the dialect protocol, engines, the unit of work, statements."""

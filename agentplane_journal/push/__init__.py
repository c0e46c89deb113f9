"""The push-delivery store: registrations, cursors, sealed secrets."""

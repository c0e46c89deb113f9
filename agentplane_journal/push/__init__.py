"""The push-delivery store: registrations, cursors, encrypted secrets."""

"""The export file format, pure: format 1 lines and bodies, reading and verifying an export,
a backup's manifest. Writing one from a store is journal/export.py; no I/O here."""

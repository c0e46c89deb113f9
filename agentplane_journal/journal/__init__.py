"""The journal store, by what it does: appends, reads, audits, leases, the log."""

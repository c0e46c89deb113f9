"""The HTTP side of the journal (the ``serve`` extra): the tlog-tiles server and the audit page."""

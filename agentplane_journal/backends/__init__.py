"""The append hot paths, one folder per database, chosen by the dialect object."""

"""The learner's foundations, imported by every wing: the typed-config builder and the one registry style, the Sample record, small file helpers and statistics."""

"""The engine: the ingest pipeline, operator adjudication and retention."""

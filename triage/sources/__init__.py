"""Stage 1, sources: files, pipes and archives in; numbered lines out (bulk lines counted, not parsed)."""

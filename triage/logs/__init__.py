"""Stage 2, log parsing: numbered lines in; typed events (with their file:line evidence) out."""

"""Stage 6, assembly: a diagnosis and its inputs in; the Report's parts out (fleet view, command, runbook)."""

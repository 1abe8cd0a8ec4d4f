"""The facts stage: events and samples in, facts out (pure: no I/O). registry.py names every fact the rules may
use; log_events.py, metric_samples.py, gpu_snapshot.py and user_figures.py find them; combine.py joins them into
each diagnosis's facts. This file imports nothing, so naming a fact loads none of the finders."""

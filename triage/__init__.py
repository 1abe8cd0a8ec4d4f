"""vtriage: OOM and preemption triage for vLLM logs and metrics."""

__version__ = "0.1.0"

"""GPU evidence: NVML or pasted nvidia-smi text in; a snapshot of memory and processes, and its facts, out."""

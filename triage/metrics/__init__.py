"""Stage 2, metrics: /metrics snapshots, live scrapes and Prometheus in; samples and metric facts out."""

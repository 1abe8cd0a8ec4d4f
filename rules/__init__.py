"""The decision tree and log signatures of vtriage, shipped as package data (triage.rules_data)."""

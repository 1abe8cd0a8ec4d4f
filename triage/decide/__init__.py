"""Stages 3-4, facts and decision: events in; facts, then the rule walk's diagnosis out (pure: no I/O)."""

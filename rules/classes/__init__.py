"""Verdict classes: titles and the facts that rule each one out."""

"""Jinja templates for the HTML renderer."""

"""Log signatures, shipped as package data."""

"""The runbook pages, shipped as package data so an installed `vtriage explain` can print them."""

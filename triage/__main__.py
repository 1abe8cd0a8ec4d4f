"""`python -m triage` runs the same command line as `vtriage`."""
from .cli import main

main()

"""`python -m ragstream.cli`: the console script."""

from ragstream.cli.app import main

main()

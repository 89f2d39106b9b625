"""`python -m ragstream.cli`: the console script."""

from ragstream.cli.app import main

if __name__ == "__main__":
    main()

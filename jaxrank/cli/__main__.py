"""``python -m jaxrank.cli``."""

from jaxrank.cli import main

if __name__ == "__main__":
    main()

"""`python -m llmload` is the `llmload` command."""

from llmload.cli import main

if __name__ == "__main__":
    main()

"""`python -m cli`: the `worktrain` command, as `worktrain up` starts its children."""

from cli.main import main

main()

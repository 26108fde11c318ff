from mambaxfer_cli.cli import main

main()

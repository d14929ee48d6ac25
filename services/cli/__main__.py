from rlstack.cli import main

main()

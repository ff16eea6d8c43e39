from hybrid.cli import main

main()

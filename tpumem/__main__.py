from tpumem.cli import main

main()

from etlstage_workers.rdss.cli import main

main()

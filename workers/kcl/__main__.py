from etlstage_workers.kcl.cli import main

main()

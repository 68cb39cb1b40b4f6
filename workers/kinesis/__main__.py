from etlstage_workers.kinesis.cli import main

main()
